package fusefs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestKillAfterKeepSizeFallocatePastMax: fallocate(FALLOC_FL_KEEP_SIZE)
// past the largest file homefs holds fails with EFBIG, as one that grows
// the file does: journaled, its range would be past any file's size, and
// the replay after a kill -9 would take the journal for damaged and refuse
// the session, the acknowledged write after it with it.
func TestKillAfterKeepSizeFallocatePastMax(t *testing.T) {
	d := startDurable(t)
	require.NoError(t, writeSync(d.mnt, "f", []byte("hello")))
	require.NoError(t, syncDir(d.mnt))
	f, err := os.OpenFile(filepath.Join(d.mnt, "f"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.ErrorIs(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 128<<30), unix.EFBIG)
	_, err = f.WriteAt([]byte("J"), 0) // an acknowledged write after it
	require.NoError(t, err)
	d.kill(t)
	m := d.remount(t)
	got, err := os.ReadFile(filepath.Join(m.Dir(), "f"))
	require.NoError(t, err)
	require.Equal(t, "Jello", string(got))
}
