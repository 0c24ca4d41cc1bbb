package fusefs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
)

// TestURingServes mounts over FUSE over io_uring and checks that the
// kernel's requests came through the rings, and that the ring threads end
// with the mount. The rest of the suite runs over the rings too with
// HOMEFS_FUSE_URING=1 (make test).
func TestURingServes(t *testing.T) {
	if _, err := hostURing.read(); err != nil {
		t.Skipf("no FUSE over io_uring here: %v", err)
	}
	store := cas.NewMemory()
	e := New(store, catalog.New(store), Options{
		StoreDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		URing:    URingOn,
	})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	if os.Getenv("HOMEFS_FUSE_URING") == "0" {
		t.Skip("HOMEFS_FUSE_URING=0")
	}
	m := MountForTest(t, e, "s", "", MountOptions{})
	require.Equal(t, "io_uring", m.Transport())
	d := m.Dir()

	// One of each kind of request the rings decode.
	p := filepath.Join(d, "a")
	require.NoError(t, os.WriteFile(p, []byte("hello"), 0o640))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(" world")
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	got := make([]byte, 64)
	n, err := f.ReadAt(got, 0)
	require.ErrorIs(t, err, io.EOF) // a read past the end of the file
	require.Equal(t, "hello world", string(got[:n]))
	require.NoError(t, f.Close())
	require.NoError(t, os.Mkdir(filepath.Join(d, "dir"), 0o755))
	require.NoError(t, os.Rename(p, filepath.Join(d, "dir", "b")))
	require.NoError(t, os.Symlink("dir/b", filepath.Join(d, "l")))
	target, err := os.Readlink(filepath.Join(d, "l"))
	require.NoError(t, err)
	require.Equal(t, "dir/b", target)
	require.NoError(t, unix.Setxattr(filepath.Join(d, "dir", "b"), "user.k", []byte("v"), 0))
	size, err := unix.Getxattr(filepath.Join(d, "dir", "b"), "user.k", nil)
	require.NoError(t, err)
	require.Equal(t, 1, size)
	names, err := os.ReadDir(filepath.Join(d, "dir"))
	require.NoError(t, err)
	require.Len(t, names, 1)
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(d, &st))
	b, err := os.ReadFile(filepath.Join(d, "l"))
	require.NoError(t, err)
	require.Equal(t, "hello world", string(b))

	us := m.uring
	require.Greater(t, us.Served(), int64(20))
	require.NoError(t, m.Unmount())
	us.Wait() // returns once every ring thread has ended
}
