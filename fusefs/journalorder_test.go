package fusefs

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/catalog"
)

// TestJournalFsyncOrder: journalFsync copies a file's unjournaled ranges
// (which an absorb or an ingest leaves) under node.mu and puts their
// records into the journal before it releases it. Were there a gap, a
// write served in it (node.mu, then logWrite under journal.mu) would
// reach the journal first, and the journal's last record of the range
// would hold the bytes from before the write: a replay after a kill -9
// would lose the acknowledged write. The test holds journal.mu while the
// fsync waits for it, makes the write in the gap if there is one (there
// was), else after the fsync, and reads the journal's last record of the
// range.
func TestJournalFsyncOrder(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := badgerstore.Open(dir, badgerstore.Options{})
	require.NoError(t, err)
	defer store.Close()
	cat := catalog.New(store)
	_, err = cat.CreateSession(ctx, "d", "")
	require.NoError(t, err)
	e := New(store, cat, Options{StoreDir: dir, FlushInterval: -1})
	defer e.Close(ctx)
	s, err := e.live(ctx, "d")
	require.NoError(t, err)
	n, err := s.Create(ctx, s.root, "f", 0o644, Owner{})
	require.NoError(t, err)
	const size = 8 << 20
	_, err = s.Write(ctx, n, bytes.Repeat([]byte("o"), size), 0, WriteOp{})
	require.NoError(t, err)
	id := s.lockedJID(n)
	require.NotZero(t, id)

	// What an absorb of a staged file (or an ingest) leaves.
	n.mu.Lock()
	s.markWritten(n, 0, size)
	n.mu.Unlock()

	done := make(chan error)
	go func() { done <- s.Fsync(ctx, n) }()
	j := s.journal
	for {
		// Until the fsync is copying the range under node.mu (it holds it
		// for a while: 8 MiB), as opposed to fsyncStaged's brief look.
		for n.mu.TryLock() {
			n.mu.Unlock()
		}
		time.Sleep(100 * time.Microsecond)
		if n.mu.TryLock() {
			n.mu.Unlock()
			continue
		}
		break
	}
	j.mu.Lock() // the fsync's records wait here
	// Look for a gap: node.mu free with the range copied and its records
	// not in the journal. There is none while the fsync puts its records
	// in under node.mu; the look ends after a second.
	gap := false
	for deadline := time.Now().Add(time.Second); !gap && time.Now().Before(deadline); time.Sleep(100 * time.Microsecond) {
		if n.mu.TryLock() {
			gap = n.data.unjournaled == nil
			n.mu.Unlock()
		}
	}
	journalWrite := func() {
		// A served write: applied under node.mu, journaled under it, as
		// logWrite does (journal.write's body, j.mu held).
		n.mu.Lock()
		require.NoError(t, n.writeAt(ctx, []byte("NEW"), 0))
		rec := n.writeRecord(id, 0, []byte("NEW"))
		j.buf = rec.appendTo(j.buf[:0], j.nonce)
		require.NoError(t, j.put(j.buf))
		j.unsynced = true
		n.mu.Unlock()
	}
	if gap {
		journalWrite()
		j.mu.Unlock()
		require.NoError(t, <-done)
	} else {
		j.mu.Unlock()
		require.NoError(t, <-done)
		j.mu.Lock()
		journalWrite()
		j.mu.Unlock()
	}

	b, err := os.ReadFile(j.path)
	require.NoError(t, err)
	_, recs, err := readJournal(bytes.NewReader(b))
	require.NoError(t, err)
	var last []byte
	for _, r := range recs {
		if r.kind == recWrite && r.off == 0 && len(r.data) >= 3 {
			last = r.data[:3]
		}
	}
	require.Equal(t, "NEW", string(last), "a replay ends with stale bytes over the acknowledged write")
}
