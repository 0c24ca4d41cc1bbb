package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Capture records root as a new snapshot of session name and makes it the
// session's head. The record's Parent is the head's last snapshot; its
// Origin is the head's Origin on the first capture after a fork; its
// handles are the head's overlaid with handles, which the head keeps too.
// The record is put into the CAS, then one durable commit writes the index
// entry snapshot/<id> and the new head, expecting the head as read: both
// land or neither does (ErrConflict if the head moved). Cost: O(1) in the
// size of the tree.
func (c *Catalog) Capture(ctx context.Context, name string, root cas.Ref, msg string, handles map[string]manifest.Handle) (*manifest.Snapshot, string, error) {
	snap, id, _, err := c.CaptureHead(ctx, name, root, msg, handles)
	return snap, id, err
}

// CaptureHead is Capture, and also returns the head it wrote: a caller
// that keeps the head's generation (a live session, whose flushes expect
// it) takes it from there rather than reading the head again.
func (c *Catalog) CaptureHead(ctx context.Context, name string, root cas.Ref, msg string, handles map[string]manifest.Handle) (*manifest.Snapshot, string, *Head, error) {
	if root.IsZero() {
		return nil, "", nil, fmt.Errorf("catalog: capture %s: zero root", name)
	}
	h, raw, err := c.readHead(ctx, name)
	if err != nil {
		return nil, "", nil, fmt.Errorf("catalog: capture: %w", err)
	}
	now := c.nowNs()
	merged := mergeHandles(h.Handles, handles)
	snap := &manifest.Snapshot{
		Version:   manifest.FormatVersion,
		Session:   name,
		Parent:    h.Snapshot,
		CreatedNs: now,
		Message:   msg,
		Handles:   merged,
		Root:      root,
	}
	if !h.Layout.IsEmpty() {
		snap.Layout = h.Layout.Clone()
	}
	snap.Version = manifest.SnapshotVersion(snap.Layout)
	if h.Snapshot == "" && h.Origin != nil {
		o := *h.Origin
		snap.Origin = &o
	}
	enc, err := manifest.EncodeSnapshot(snap)
	if err != nil {
		return nil, "", nil, fmt.Errorf("catalog: capture %s: %w", name, err)
	}
	ref, err := c.store.Put(ctx, enc)
	if err != nil {
		return nil, "", nil, fmt.Errorf("catalog: capture %s: put record: %w", name, err)
	}
	id := manifest.SnapshotID(enc)
	if id != ref.Hex() {
		return nil, "", nil, fmt.Errorf("catalog: capture %s: store put the record as %s, its id is %s", name, ref.Short(), id)
	}
	h.Root = root
	h.Snapshot = id
	h.Handles = mergeHandles(merged, nil)
	h.UpdatedNs = now
	h.Gen++
	// No Expect on the index: a record equal to an earlier one (same
	// parent, time and content) has the same id and the same session.
	index := cas.NameOp{Name: snapshotName(id), Value: []byte(name)}
	if err := c.replaceHead(ctx, h, raw, []cas.NameOp{index}, true); err != nil {
		return nil, "", nil, fmt.Errorf("catalog: capture %s: %w", name, err)
	}
	return snap, id, h, nil
}

// Snapshot returns the snapshot named by id, a full id or a unique prefix
// of at least MinPrefixLen hex digits, and its full id. The record is read
// from the CAS (which checks its hash) and must hash to the id and decode;
// otherwise the error wraps cas.ErrCorrupt.
func (c *Catalog) Snapshot(ctx context.Context, id string) (*manifest.Snapshot, string, error) {
	full, session, err := c.lookupID(ctx, id, "")
	if err != nil {
		return nil, "", err
	}
	snap, err := loadRecord(ctx, c.store, full)
	if err != nil {
		return nil, "", err
	}
	if snap.Session != session {
		return nil, "", fmt.Errorf("catalog: snapshot %s: %w: record says session %q, index says %q",
			full, cas.ErrCorrupt, snap.Session, session)
	}
	return snap, full, nil
}

// lookupID resolves a full id or prefix through the snapshot index, keeping
// only snapshots of session when it is not empty. It returns the full id and
// the indexed session.
func (c *Catalog) lookupID(ctx context.Context, id, session string) (full, owner string, err error) {
	id = strings.ToLower(id)
	if !isHex(id) {
		// Maybe a session's name: not found rather than malformed.
		return "", "", fmt.Errorf("catalog: snapshot %q: want %d to %d hex digits: %w", id, MinPrefixLen, idLen, ErrNoSnapshot)
	}
	if len(id) < MinPrefixLen || len(id) > idLen {
		return "", "", fmt.Errorf("catalog: snapshot %q: want %d to %d hex digits: %w: %w", id, MinPrefixLen, idLen, ErrBadPrefix, ErrNoSnapshot)
	}
	var matches []string
	err = c.store.ListNames(ctx, snapshotName(id), func(key string, value []byte) error {
		if session != "" && string(value) != session {
			return nil
		}
		matches = append(matches, key[len(snapshotPrefix):])
		owner = string(value)
		if len(matches) > 1 {
			return errAmbiguousStop
		}
		return nil
	})
	switch {
	case errors.Is(err, errAmbiguousStop):
		return "", "", fmt.Errorf("catalog: snapshot %s: %s, %s, …: %w", id, matches[0][:12], matches[1][:12], ErrAmbiguous)
	case err != nil:
		return "", "", fmt.Errorf("catalog: snapshot %s: %w", id, err)
	case len(matches) == 0:
		return "", "", fmt.Errorf("catalog: snapshot %s: %w", id, ErrNoSnapshot)
	}
	return matches[0], owner, nil
}

// errAmbiguousStop ends a ListNames early once a second match is seen.
var errAmbiguousStop = errors.New("second match")

// loadRecord reads and checks the record of full id.
func loadRecord(ctx context.Context, g cas.Getter, id string) (*manifest.Snapshot, error) {
	ref, err := cas.ParseRef("sha256:" + id)
	if err != nil {
		return nil, fmt.Errorf("catalog: snapshot %q: %w", id, ErrNoSnapshot)
	}
	data, err := g.Get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("catalog: snapshot %s: record: %w", id, err)
	}
	if got := manifest.SnapshotID(data); got != id {
		return nil, fmt.Errorf("catalog: snapshot %s: %w: record hashes to %s", id, cas.ErrCorrupt, got)
	}
	snap, err := manifest.DecodeSnapshot(data)
	if errors.Is(err, manifest.ErrUnsupportedVersion) {
		// A later homefs wrote it (a remote's record): not damage.
		return nil, fmt.Errorf("catalog: snapshot %s: %w (upgrade homefs to read it)", id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: snapshot %s: %w: %w", id, cas.ErrCorrupt, err)
	}
	return snap, nil
}

// Resolve returns the snapshot named by spec, and its full id:
//
//	SESSION@SNAPSHOT  a snapshot (id or unique prefix) of that session
//	@SNAPSHOT         a snapshot (id or unique prefix), of any session
//	SESSION           the session's last snapshot (ErrNoSnapshot if none)
//	SNAPSHOT          a snapshot (id or unique prefix)
//
// A bare string that names an existing session always means the session,
// even if it also looks like a snapshot prefix; write @SNAPSHOT to mean the
// snapshot. A session with a prefix is not disambiguated against other
// sessions' snapshots: SESSION@PREFIX only considers that session's.
func (c *Catalog) Resolve(ctx context.Context, spec string) (*manifest.Snapshot, string, error) {
	if sess, id, ok := strings.Cut(spec, "@"); ok {
		if sess != "" {
			if err := validSession(sess); err != nil {
				return nil, "", fmt.Errorf("catalog: resolve %q: %w", spec, err)
			}
		}
		full, _, err := c.lookupID(ctx, id, sess)
		if err != nil {
			return nil, "", fmt.Errorf("catalog: resolve %q: %w", spec, err)
		}
		snap, full, err := c.Snapshot(ctx, full)
		if err != nil {
			return nil, "", fmt.Errorf("catalog: resolve %q: %w", spec, err)
		}
		return snap, full, nil
	}
	if manifest.ValidateSessionName(spec) == nil {
		h, err := c.Head(ctx, spec)
		switch {
		case err == nil:
			if h.Snapshot == "" {
				return nil, "", fmt.Errorf("catalog: resolve %q: session has no snapshot: %w", spec, ErrNoSnapshot)
			}
			snap, full, err := c.Snapshot(ctx, h.Snapshot)
			if err != nil {
				return nil, "", fmt.Errorf("catalog: resolve %q: %w", spec, err)
			}
			return snap, full, nil
		case !errors.Is(err, ErrNoSession):
			return nil, "", fmt.Errorf("catalog: resolve %q: %w", spec, err)
		}
	}
	snap, full, err := c.Snapshot(ctx, spec)
	if err != nil {
		return nil, "", fmt.Errorf("catalog: resolve %q: %w", spec, err)
	}
	return snap, full, nil
}

// LogEntry is one snapshot in a session's history, or a gap in it.
type LogEntry struct {
	ID       string
	Snapshot *manifest.Snapshot // nil for a gap
	// Session is the session that captured the snapshot; it differs from
	// the session asked about for history inherited through a fork. For a
	// gap, it is the session the link expects (the child's for a Parent,
	// the origin's for an Origin).
	Session string
	// ForkPoint marks the snapshot a fork started from: the entries after
	// it (older) belong to the origin session's history.
	ForkPoint bool
	// Forgotten marks a gap: ID is the snapshot a Parent or Origin link
	// names, which is no longer indexed. After a Parent's gap come the
	// older snapshots of Session that are still kept, if any; an Origin's
	// gap ends the log.
	Forgotten bool
}

// maxLog bounds the length of a history Log walks.
const maxLog = 1 << 20

// Log returns the history of session, newest first: its snapshots along
// Parent, and where a chain reaches a fork (a record with Origin, or the
// head's Origin before the first capture), the origin snapshot's history.
// A link to a forgotten snapshot (not indexed, whether or not gc has
// dropped its record yet) is a gap entry, never an error. After a Parent's
// gap the walk goes on with the newest snapshot of the session that is
// still indexed and older than the snapshot holding the link, since
// forgetting keeps no lineage across what it removed (after a restore
// that branched a session's history, that may be a snapshot of another
// branch); an Origin's gap ends the log, where the origin session's own
// log tells the rest. It
// stops with an error on a cycle (which only corruption can produce),
// after maxLog entries, or at an unreadable record of an indexed snapshot,
// returning what it has so far alongside the error.
func (c *Catalog) Log(ctx context.Context, session string) ([]LogEntry, error) {
	h, err := c.Head(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("catalog: log: %w", err)
	}
	start := logStart{next: h.Snapshot, linkSession: session, before: math.MaxInt64}
	if start.next == "" && h.Origin != nil {
		start = logStart{next: h.Origin.Snapshot, fork: true, linkSession: h.Origin.Session, before: h.CreatedNs}
	}
	return c.walkLog(ctx, session, start)
}

// LogOf returns the history Log returns, for spec: a session with a head
// here (Log); a snapshot (a full id, a prefix, SESSION@ID), from that
// snapshot; or a session without a head here whose snapshots are here
// (pulled from a remote, or left by session rm), from the newest of them.
// A spec that is none of these wraps ErrNoSession, or ErrNoSnapshot for
// an id.
func (c *Catalog) LogOf(ctx context.Context, spec string) ([]LogEntry, error) {
	if !strings.Contains(spec, "@") && manifest.ValidateSessionName(spec) == nil {
		log, err := c.Log(ctx, spec)
		if !errors.Is(err, ErrNoSession) {
			return log, err
		}
		id, err := c.newestOf(ctx, spec)
		if err != nil {
			return nil, fmt.Errorf("catalog: log: %w", err)
		}
		if id != "" {
			return c.walkLog(ctx, spec, logStart{next: id, linkSession: spec, before: math.MaxInt64})
		}
		if len(spec) < MinPrefixLen || !isHex(strings.ToLower(spec)) {
			return nil, fmt.Errorf("catalog: log: no session %s here, and no snapshot of it (pull it first: homefs pull %s REMOTE): %w", spec, spec, ErrNoSession)
		}
	}
	snap, id, err := c.Resolve(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("catalog: log: %w", err)
	}
	return c.walkLog(ctx, spec, logStart{next: id, linkSession: snap.Session, before: math.MaxInt64})
}

// newestOf returns the id of session's newest indexed snapshot (by
// creation time, then id), or "" when none is indexed.
func (c *Catalog) newestOf(ctx context.Context, session string) (string, error) {
	idx, err := c.SnapshotIndex(ctx)
	if err != nil {
		return "", err
	}
	var best string
	var bestNs int64
	for _, e := range idx {
		if e.Session != session {
			continue
		}
		snap, err := loadRecord(ctx, c.store, e.ID)
		if err != nil {
			return "", err
		}
		if best == "" || snap.CreatedNs > bestNs || (snap.CreatedNs == bestNs && e.ID > best) {
			best, bestNs = e.ID, snap.CreatedNs
		}
	}
	return best, nil
}

// logStart is where a log's walk starts: the snapshot next (a fork's
// origin when fork), linked from linkSession's history, created before
// before (ns).
type logStart struct {
	next        string
	fork        bool
	linkSession string
	before      int64
}

// walkLog is Log's walk from start; session names the log in errors.
func (c *Catalog) walkLog(ctx context.Context, session string, start logStart) ([]LogEntry, error) {
	next, fork, linkSession, before := start.next, start.fork, start.linkSession, start.before
	var log []LogEntry
	seen := make(map[string]bool)
	var kept map[string][]Candidate // by session, newest first; read at the first gap
	for next != "" {
		if err := ctx.Err(); err != nil {
			return log, err
		}
		if seen[next] {
			return log, fmt.Errorf("catalog: log %s: %w: cycle at snapshot %s", session, cas.ErrCorrupt, next)
		}
		if len(log) >= maxLog {
			return log, fmt.Errorf("catalog: log %s: longer than %d snapshots", session, maxLog)
		}
		seen[next] = true
		indexed, err := c.HasSnapshot(ctx, next)
		if err != nil {
			return log, fmt.Errorf("catalog: log %s: %w", session, err)
		}
		if !indexed {
			log = append(log, LogEntry{ID: next, Session: linkSession, ForkPoint: fork, Forgotten: true})
			if fork {
				break // the origin session's history is its own log
			}
			if kept == nil {
				if kept, err = c.keptBySession(ctx); err != nil {
					return log, fmt.Errorf("catalog: log %s: %w", session, err)
				}
			}
			next, fork = "", false
			for _, k := range kept[linkSession] {
				if k.Time.UnixNano() < before && !seen[k.ID] {
					next = k.ID
					break
				}
			}
			continue
		}
		snap, err := loadRecord(ctx, c.store, next)
		if err != nil {
			return log, fmt.Errorf("catalog: log %s: %w", session, err)
		}
		log = append(log, LogEntry{ID: next, Snapshot: snap, Session: snap.Session, ForkPoint: fork})
		next, fork, linkSession, before = snap.Parent, false, snap.Session, snap.CreatedNs
		if next == "" && snap.Origin != nil {
			next, fork, linkSession = snap.Origin.Snapshot, true, snap.Origin.Session
		}
	}
	return log, nil
}

// keptBySession returns every indexed snapshot by session, newest first.
func (c *Catalog) keptBySession(ctx context.Context) (map[string][]Candidate, error) {
	idx, err := c.SnapshotIndex(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]Candidate)
	for _, e := range idx {
		snap, err := loadRecord(ctx, c.store, e.ID)
		if err != nil {
			return nil, err
		}
		out[e.Session] = append(out[e.Session], Candidate{ID: e.ID, Time: time.Unix(0, snap.CreatedNs)})
	}
	for _, l := range out {
		slices.SortFunc(l, func(a, b Candidate) int {
			if c := b.Time.Compare(a.Time); c != 0 {
				return c
			}
			return strings.Compare(b.ID, a.ID)
		})
	}
	return out, nil
}

// maxHistory bounds InHistory's walk.
const maxHistory = 1 << 20

// InHistory reports whether snapshot id is one of h's own snapshots: the
// head's last snapshot or one of its parents (within the session, not
// across the fork it started from). A restore to anything else is a fork
// in place. A parent whose record gc has dropped (it was forgotten) ends
// the walk: what lies beyond is unknown, and the answer is no, which
// makes a restore across the gap drop derived state as a fork does (safe,
// if not needed). It costs one record read per snapshot walked.
func (c *Catalog) InHistory(ctx context.Context, h *Head, id string) (bool, error) {
	next := h.Snapshot
	for i := 0; next != "" && i < maxHistory; i++ {
		if next == id {
			return true, nil
		}
		snap, err := loadRecord(ctx, c.store, next)
		if errors.Is(err, cas.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("catalog: history of %s: %w", h.Session, err)
		}
		if snap.Session != h.Session {
			return false, nil
		}
		next = snap.Parent
	}
	return false, nil
}
