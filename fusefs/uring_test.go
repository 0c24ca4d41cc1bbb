package fusefs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fusefs/uring"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/fusectl"
	"github.com/homefs/homefs/internal/testkit/threadtest"
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
	us.Wait() // returns once the rings have let go of the mount
}

// TestURingMountsShareRings: the engine's mounts over io_uring share the
// process's ring threads: with one mount or six, the threads that wait
// for the kernel are the rings' (one a CPU, in io_uring_enter), none
// waits on a mount's /dev/fuse, and the process gains less than a thread
// a mount. Aborting one mount's connection ends that mount alone; the
// others go on serving.
func TestURingMountsShareRings(t *testing.T) {
	if _, err := hostURing.read(); err != nil {
		t.Skipf("no FUSE over io_uring here: %v", err)
	}
	if os.Getenv("HOMEFS_FUSE_URING") == "0" {
		t.Skip("HOMEFS_FUSE_URING=0")
	}
	rings, err := uring.RingThreads()
	require.NoError(t, err)
	store := cas.NewMemory()
	e := New(store, catalog.New(store), Options{
		StoreDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		URing:    URingOn,
	})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	settled := func() {
		t.Helper()
		require.NoError(t, threadtest.AwaitRings(rings))
	}
	use := func(m *Mount, name string) {
		t.Helper()
		p := filepath.Join(m.Dir(), name)
		require.NoError(t, os.WriteFile(p, []byte(name), 0o644))
		got, err := os.ReadFile(p)
		require.NoError(t, err)
		require.Equal(t, name, string(got))
	}

	mounts := []*Mount{MountForTest(t, e, "s0", "", MountOptions{})}
	use(mounts[0], "a")
	settled()
	before, err := threadtest.Threads()
	require.NoError(t, err)
	for i := 1; i < 6; i++ {
		m := MountForTest(t, e, fmt.Sprintf("s%d", i), "", MountOptions{})
		require.Equal(t, "io_uring", m.Transport())
		use(m, "a")
		mounts = append(mounts, m)
	}
	settled()
	after, err := threadtest.Threads()
	require.NoError(t, err)
	require.Less(t, after-before, len(mounts)-1, "threads with 1 mount: %d, with %d: %d", before, len(mounts), after)

	gone := mounts[2]
	require.NotEmpty(t, gone.conn)
	require.NoError(t, os.WriteFile(filepath.Join(fusectl.Dir, gone.conn, "abort"), []byte("1"), 0o200))
	ended := make(chan struct{})
	go func() {
		gone.uring.Wait()
		gone.server.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(60 * time.Second):
		t.Fatal("the aborted mount's servers did not end")
	}
	_, err = os.ReadDir(gone.Dir())
	require.ErrorIs(t, err, unix.ENOTCONN)
	for i, m := range mounts {
		if m != gone {
			use(m, fmt.Sprintf("after%d", i))
		}
	}
	settled()
}

// A mount that someone else took out of the mount table (umount -l, or a
// daemon's start detaching a mount whose connection was aborted) is not
// mounted any more: Unmount says so and the engine forgets it, so that
// it can mount the dir again.
func TestUnmountDetachedElsewhere(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, nil, Options{})
	m := MountForTest(t, e, "s", "", MountOptions{})
	require.NoError(t, unix.Unmount(m.Dir(), unix.MNT_DETACH))
	require.ErrorIs(t, m.Unmount(), ErrNotMounted)
	require.Empty(t, e.Mounts())
	again := MountForTest(t, e, "s", "", MountOptions{})
	require.NoError(t, os.WriteFile(filepath.Join(again.Dir(), "f"), []byte("x"), 0o644))
}
