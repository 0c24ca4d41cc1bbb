package fusefs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSessionState: writes through the daemon count as dirty bytes, writes
// to a staged file as staged bytes, changed entries as dirty entries; a
// flush clears them all and moves LastFlush.
func TestSessionState(t *testing.T) {
	ctx := context.Background()
	e := newTestEngine(t, nil, Options{FlushInterval: -1})
	_, ok := e.SessionState("s")
	require.False(t, ok, "not live before it is mounted")
	m := MountForTest(t, e, "s", "", MountOptions{})
	st, ok := e.SessionState("s")
	require.True(t, ok)
	require.Zero(t, st.DirtyBytes)
	require.Zero(t, st.DirtyEntries)
	loaded := st.LastFlush
	require.False(t, loaded.IsZero(), "as of its head")

	// Read-write: served by the daemon, into write buffers.
	f, err := os.OpenFile(filepath.Join(m.Dir(), "rw"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = f.Write(make([]byte, 100_000))
	require.NoError(t, err)
	// Write-only and new: staged, written by the kernel to a local file.
	g, err := os.OpenFile(filepath.Join(m.Dir(), "out"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	_, err = g.Write(make([]byte, 30_000))
	require.NoError(t, err)
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "d"), 0o755))

	st, _ = e.SessionState("s")
	require.GreaterOrEqual(t, st.DirtyBytes, int64(100_000))
	require.GreaterOrEqual(t, st.DirtyEntries, 3, "rw, out, d and the root")
	t.Logf("staged files: %d, state %+v", len(m.sess.backed.list()), st)
	if len(m.sess.backed.list()) > 0 { // staging needs O_TMPFILE where the store is
		require.Equal(t, int64(30_000), st.StagedBytes)
	}

	time.Sleep(time.Millisecond)
	require.NoError(t, f.Close())
	require.NoError(t, g.Close())
	_, _, err = e.Capture(ctx, "s", "", nil)
	require.NoError(t, err)
	st, _ = e.SessionState("s")
	require.Zero(t, st.DirtyBytes)
	require.Zero(t, st.StagedBytes)
	require.True(t, st.LastFlush.After(loaded), "%v after %v", st.LastFlush, loaded)
	// The kernel sends RELEASE after close returns: a staged file released
	// after the capture is marked for the next flush to look at again, and
	// while it is open the journal holds its live record (resetJournal).
	for deadline := time.Now().Add(5 * time.Second); (st.DirtyEntries > 0 || st.JournalBytes > 0) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, e.Sync(ctx, "s"))
		st, _ = e.SessionState("s")
	}
	require.Zero(t, st.DirtyEntries)
	require.Zero(t, st.DirtyBytes)
	require.Zero(t, st.JournalBytes)

	// An fsync of a file the durable head has goes to the journal: durable,
	// not flushed, so still dirty; unless the fsync must flush (a late
	// release left a change the journal cannot replay).
	f, err = os.OpenFile(filepath.Join(m.Dir(), "rw"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte("journaled"), 10)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	flushed := st.LastFlush
	st, _ = e.SessionState("s")
	if st.JournalBytes == 0 {
		require.True(t, st.LastFlush.After(flushed), "neither journaled nor flushed: %+v", st)
		return
	}
	require.Greater(t, st.JournalBytes, int64(len("journaled")))
	require.Greater(t, st.DirtyBytes, int64(0))
	require.Equal(t, flushed, st.LastFlush)
}
