package fusefs

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/manifest"
)

// statxOf is statx(2) of path (not following a symlink) asking for the
// basic stats and the birth time.
func statxOf(t *testing.T, path string) unix.Statx_t {
	t.Helper()
	var sx unix.Statx_t
	require.NoError(t, unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &sx), "statx %s", path)
	return sx
}

// btimeOf returns path's birth time, failing the test if statx has none.
func btimeOf(t *testing.T, path string) unix.StatxTimestamp {
	t.Helper()
	sx := statxOf(t, path)
	require.NotZero(t, sx.Mask&unix.STATX_BTIME, "%s: no STATX_BTIME in mask %#x", path, sx.Mask)
	return sx.Btime
}

func tsNs(ts unix.StatxTimestamp) int64 { return ts.Sec*1e9 + int64(ts.Nsec) }

// TestStatxBtime: every node made on a mount has a birth time, the time
// it was made, which statx reports (beside what stat reports) and which
// writes, chmod, chown, utimes, rename and links leave; capture, fork,
// restore and a remount keep it. A node from a tree without one has none
// (STATX_BTIME absent from the mask).
func TestStatxBtime(t *testing.T) {
	e, m := newMount(t)
	ctx := context.Background()
	d := m.Dir()
	before := time.Now().UnixNano()
	require.NoError(t, os.WriteFile(filepath.Join(d, "file"), []byte("x"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(d, "dir"), 0o755))
	require.NoError(t, os.Symlink("file", filepath.Join(d, "link")))
	require.NoError(t, unix.Mkfifo(filepath.Join(d, "dir/fifo"), 0o600))
	require.NoError(t, unix.Mknod(filepath.Join(d, "loop"), unix.S_IFBLK|0o600, int(unix.Mkdev(7, 300))))
	fd, err := unix.Open(d, unix.O_TMPFILE|unix.O_RDWR, 0o600)
	require.NoError(t, err)
	require.NoError(t, linkFd(fd, filepath.Join(d, "dir/tmp")))
	require.NoError(t, unix.Close(fd))
	after := time.Now().UnixNano()

	names := []string{"file", "dir", "link", "dir/fifo", "loop", "dir/tmp"}
	born := map[string]unix.StatxTimestamp{}
	for _, name := range names {
		p := filepath.Join(d, name)
		bt := btimeOf(t, p)
		require.True(t, tsNs(bt) >= before && tsNs(bt) <= after, "%s: btime %d not in [%d, %d]", name, tsNs(bt), before, after)
		born[name] = bt
		// The rest is what stat says.
		sx, st := statxOf(t, p), stat(t, p)
		require.Equal(t, uint32(st.Mode), uint32(sx.Mode), name)
		require.Equal(t, st.Ino, sx.Ino, name)
		require.Equal(t, uint64(st.Nlink), uint64(sx.Nlink), name)
		require.Equal(t, [2]uint32{st.Uid, st.Gid}, [2]uint32{sx.Uid, sx.Gid}, name)
		require.Equal(t, st.Size, int64(sx.Size), name)
		require.Equal(t, st.Blocks, int64(sx.Blocks), name)
		require.Equal(t, st.Mtim.Nano(), tsNs(sx.Mtime), name)
		require.Equal(t, st.Ctim.Nano(), tsNs(sx.Ctime), name)
		require.Equal(t, st.Rdev, unix.Mkdev(sx.Rdev_major, sx.Rdev_minor), name)
	}
	require.Equal(t, [2]uint32{7, 300}, [2]uint32{statxOf(t, filepath.Join(d, "loop")).Rdev_major, statxOf(t, filepath.Join(d, "loop")).Rdev_minor})
	require.Equal(t, born["file"], btimeOf(t, filepath.Join(d, "file")), "a second statx")

	// Changes of content, attributes and names leave it.
	require.NoError(t, os.WriteFile(filepath.Join(d, "file"), []byte("more"), 0o644))
	require.NoError(t, os.Chmod(filepath.Join(d, "file"), 0o600))
	require.NoError(t, os.Chown(filepath.Join(d, "dir"), 1000, 100))
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(d, "dir/tmp"), fixedTimes, 0))
	require.NoError(t, os.Rename(filepath.Join(d, "dir/fifo"), filepath.Join(d, "fifo")))
	require.NoError(t, os.Link(filepath.Join(d, "dir/tmp"), filepath.Join(d, "tmp2")))
	require.NoError(t, os.WriteFile(filepath.Join(d, "dir/new"), nil, 0o644)) // the directory changes
	moved := map[string]string{"dir/fifo": "fifo"}
	check := func(where, root string) {
		t.Helper()
		for _, name := range names {
			p := name
			if to, ok := moved[name]; ok {
				p = to
			}
			require.Equal(t, born[name], btimeOf(t, filepath.Join(root, p)), "%s: %s", where, name)
		}
		require.Equal(t, born["dir/tmp"], btimeOf(t, filepath.Join(root, "tmp2")), "%s: a hard link", where)
	}
	check("live", d)

	_, snap := captureMount(t, e, "s")
	check("snapshot", snap)
	f := forkMount(t, e, "s", "f")
	check("fork", f.Dir())
	_, id, err := e.Capture(ctx, "s", "kept", nil)
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(d, "dir")))
	require.NoError(t, e.Restore(ctx, "s", id))
	check("restored", d)
	require.NoError(t, m.Unmount())
	m2 := MountForTest(t, e, "s", "", MountOptions{})
	check("remounted", m2.Dir())

	// A tree that records no birth time (an import without one, a tree
	// from before they were kept): statx has none to give.
	root, err := manifest.BuildTree(ctx, e.store, map[string]manifest.Entry{
		"old": {Kind: manifest.KindSymlink, Mode: 0o777, MtimeNs: 1, CtimeNs: 1, Target: "x", Size: 1},
	})
	require.NoError(t, err)
	_, err = e.Catalog().CreateSessionAt(ctx, "old", root)
	require.NoError(t, err)
	old := MountForTest(t, e, "old", "", MountOptions{})
	sx := statxOf(t, filepath.Join(old.Dir(), "old"))
	require.Zero(t, sx.Mask&unix.STATX_BTIME, "mask %#x", sx.Mask)
	require.NotZero(t, sx.Mask&unix.STATX_MTIME)
	// Made there, a node has one, and so does the tree stored with it.
	require.NoError(t, os.WriteFile(filepath.Join(old.Dir(), "new"), nil, 0o644))
	btimeOf(t, filepath.Join(old.Dir(), "new"))
}
