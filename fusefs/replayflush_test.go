package fusefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/catalog"
)

// failingCommit fails every name commit (the head's move) while fail is set.
type failingCommit struct {
	*badgerstore.Store
	fail bool
}

func (f *failingCommit) Commit(ctx context.Context, ops []cas.NameOp, durable bool) error {
	if f.fail {
		return errors.New("injected: head commit failed")
	}
	return f.Store.Commit(ctx, ops, durable)
}

// TestReplayFlushFailureKeepsJournal: a load replays a journal holding an
// fsynced write, and the flush that folds it into the head fails at the
// head's commit (or the daemon dies just before it). The journal still
// holds the fsynced write for the next load: that flush wrote no next
// block over the replayed journal's header (journalNext).
func TestReplayFlushFailureKeepsJournal(t *testing.T) {
	d := startDurable(t)
	require.NoError(t, writeSync(d.mnt, "f", []byte("old old old")))
	require.NoError(t, syncDir(d.mnt)) // in the durable head
	f, err := os.OpenFile(filepath.Join(d.mnt, "f"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("NEW"), 0)
	require.NoError(t, err)
	require.NoError(t, f.Sync()) // journaled fsync: acknowledged durable
	f.Close()
	d.kill(t)

	// First load: the replay's flush cannot move the head.
	{
		bs, err := badgerstore.Open(d.storeDir, badgerstore.Options{})
		require.NoError(t, err)
		st := &failingCommit{Store: bs, fail: true}
		e := New(st, catalog.New(st), Options{StoreDir: d.storeDir, FlushInterval: -1})
		_, err = e.Mount(context.Background(), "d", "", t.TempDir(), MountOptions{})
		require.Error(t, err, "the load fails")
		require.NoError(t, e.Close(context.Background()))
		require.NoError(t, bs.Close())
	}
	// Second load: nothing in the way.
	m := d.remount(t)
	got, err := os.ReadFile(filepath.Join(m.Dir(), "f"))
	require.NoError(t, err)
	require.Equal(t, "NEW old old", string(got))
}
