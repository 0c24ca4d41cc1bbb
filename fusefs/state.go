package fusefs

import (
	"sort"
	"time"
)

// SessionState is what a live session holds that its durable head does
// not yet: what a flush would store now. It is read from counters the
// write path keeps, never by walking the tree.
type SessionState struct {
	// DirtyBytes is what the session's write buffers hold: file content
	// written through the daemon since the last flush, as the engine's
	// memory budget counts it. Buffers spilled to the store ahead of a
	// flush (past the budget) no longer count, though the flush still has
	// to name them.
	DirtyBytes int64
	// StagedBytes is file content written through the kernel to staged and
	// passed-through files (staged.go, passthrough.go) since the daemon
	// last read it: their size past what it read, or the whole size of one
	// rewritten since.
	StagedBytes int64
	// JournalBytes is what fsyncs wrote to the session's write-ahead
	// journal since the last flush (records: data and their headers). An
	// fsync of a file whose path the head already has goes there, not to
	// a flush: those writes are durable (replayed after a crash) but still
	// in DirtyBytes, for the next flush to store.
	JournalBytes int64
	// DirtyEntries counts the files and directories changed since the
	// last flush.
	DirtyEntries int
	// LastFlush is when the session head last durably took every change
	// (a flush, an fsync, a capture); for a session not flushed since the
	// daemon loaded it, when its head was last written.
	LastFlush time.Time
}

// SessionState reports on the live session name; ok is false when it is
// not live (not mounted, nor loaded by an operation).
func (e *Engine) SessionState(name string) (st SessionState, ok bool) {
	e.mu.Lock()
	s, ok := e.sessions[name]
	e.mu.Unlock()
	if !ok {
		return SessionState{}, false
	}
	return s.state(), true
}

// LiveSessions names the live sessions (mounted, or loaded by an
// operation), in order.
func (e *Engine) LiveSessions() []string {
	e.mu.Lock()
	names := make([]string, 0, len(e.sessions))
	for name := range e.sessions {
		names = append(names, name)
	}
	e.mu.Unlock()
	sort.Strings(names)
	return names
}

func (s *Session) state() SessionState {
	st := SessionState{DirtyBytes: s.dirtyBytes.Load()}
	if ns := s.lastFlush.Load(); ns != 0 {
		st.LastFlush = time.Unix(0, ns)
	}
	s.dirtyMu.Lock()
	st.DirtyEntries = len(s.dirty)
	s.dirtyMu.Unlock()
	if j := s.journal; j != nil {
		j.mu.Lock()
		st.JournalBytes = max(0, j.size-int64(journalHeaderLen))
		j.mu.Unlock()
	}
	// Files with a backing file are the few open for writing through the
	// kernel, or lately so: one fstat each.
	for _, n := range s.backed.list() {
		n.mu.Lock()
		if b := n.data.backing; b != nil && b.f != nil {
			if fi, err := b.f.Stat(); err == nil {
				switch size := fi.Size(); {
				case size > b.ingested && b.kind != backingWild:
					st.StagedBytes += size - b.ingested
				case size != b.ingested || fi.ModTime().UnixNano() != b.mtime || b.kind == backingWild:
					st.StagedBytes += size
				}
			}
		}
		n.mu.Unlock()
	}
	return st
}
