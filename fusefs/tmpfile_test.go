package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/internal/testkit/testuser"
)

// openTmpfile makes an unnamed file in dir with O_TMPFILE and flags. It
// is an *os.File so that the test's own close and the one at cleanup
// close the descriptor once: a second close of the number would close
// whatever the process opened with it since.
func openTmpfile(t *testing.T, dir string, flags int, mode uint32) *os.File {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_TMPFILE|flags, mode)
	require.NoError(t, err, "O_TMPFILE in %s", dir)
	f := os.NewFile(uintptr(fd), "O_TMPFILE in "+dir)
	t.Cleanup(func() { f.Close() })
	return f
}

// linkFd names the file open as fd at path, as linkat(2) from
// /proc/self/fd does.
func linkFd(fd int, path string) error {
	return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
}

// pwriteAll writes b at 0 in writes of step bytes.
func pwriteAll(t *testing.T, fd int, b []byte, step int) {
	t.Helper()
	for off := 0; off < len(b); off += step {
		end := min(off+step, len(b))
		k, err := unix.Pwrite(fd, b[off:end], int64(off))
		require.NoError(t, err)
		require.Equal(t, end-off, k)
	}
}

// TestTmpfile: open(dir, O_TMPFILE) makes a file in no directory (nlink
// 0, no entry, in no capture); linkat from /proc/self/fd names it, with
// its content, mode and owner, which a capture and a remount keep; an
// O_EXCL one cannot be named; one never named is gone, with its write
// buffers, at its last close.
func TestTmpfile(t *testing.T) {
	e := newTestEngine(t, nil, Options{FlushInterval: -1}) // only the last close drops buffers
	m := MountForTest(t, e, "s", "", MountOptions{})
	d := m.Dir()
	require.NoError(t, os.Mkdir(filepath.Join(d, "sub"), 0o755))

	// Each write route a new file may take: served by the daemon (O_RDWR)
	// and staged (O_WRONLY), and a file of several chunks.
	big := randBytes(21, 3<<20+12345)
	for _, tc := range []struct {
		name  string
		flags int
		data  []byte
	}{
		{"rdwr", unix.O_RDWR, []byte("daemon-served")},
		{"wronly", unix.O_WRONLY, []byte("staged")},
		{"big", unix.O_RDWR, big},
	} {
		checkTmpfileNamed(t, filepath.Join(d, "sub"), tc.name, tc.flags, tc.data)
	}

	checkTmpfileDirs(t, d)

	// O_EXCL: the file can never be named (the kernel refuses, ENOENT).
	exclf := openTmpfile(t, d, unix.O_RDWR|unix.O_EXCL, 0o600)
	excl := int(exclf.Fd())
	_, err := unix.Write(excl, []byte("never named"))
	require.NoError(t, err)
	requireErrno(t, linkFd(excl, filepath.Join(d, "excl")), unix.ENOENT)
	// The session refuses too, should a kernel send that LINK.
	ctx := context.Background()
	n, err := m.sess.Tmpfile(m.sess.root, 0o600, Owner{}, false)
	require.NoError(t, err)
	requireErrno(t, m.sess.Link(ctx, m.sess.root, "excl", n), unix.ENOENT)

	// A file never named, with buffered writes, open across a capture.
	lostf := openTmpfile(t, d, unix.O_RDWR, 0o600)
	lost := int(lostf.Fd())
	pwriteAll(t, lost, randBytes(22, 300<<10), 64<<10)
	live := dumpTree(t, d)
	require.Len(t, live, 4, "sub and its three files: %v", live)
	_, snap := captureMount(t, e, "s")
	require.Equal(t, live, dumpTree(t, snap), "a capture holds the named files only")

	// The capture stored every buffer; these stay buffered.
	pwriteAll(t, lost, randBytes(23, 200<<10), 64<<10)
	require.Positive(t, m.sess.dirtyBytes.Load(), "the unnamed file's buffers")
	flushed := m.sess.lastFlush.Load()
	require.NoError(t, unix.Fsync(lost))
	require.Equal(t, flushed, m.sess.lastFlush.Load(), "fsync of a file with no name moved the head")
	require.Positive(t, m.sess.dirtyBytes.Load(), "fsync of a file with no name flushed the session")
	require.NoError(t, lostf.Close())
	require.NoError(t, exclf.Close())
	require.Eventually(t, func() bool {
		return m.sess.dirtyBytes.Load() == 0 && len(m.sess.open.list()) == 0
	}, 20*time.Second, 10*time.Millisecond, "the unnamed files' buffers are dropped at their close")
	require.Equal(t, live, dumpTree(t, d))

	// A remount reads the named files back from the stored tree.
	require.NoError(t, m.Unmount())
	m2 := MountForTest(t, e, "s", "", MountOptions{})
	require.Equal(t, live, dumpTree(t, m2.Dir()))
	require.True(t, bytes.Equal(big, []byte(read(t, filepath.Join(m2.Dir(), "sub/big")))))
}

// checkTmpfileNamed writes data through an O_TMPFILE file in dir opened
// with flags, checks it has no name, then names it with linkat (twice)
// and checks the names, the descriptor and the content agree.
func checkTmpfileNamed(t *testing.T, dir, name string, flags int, data []byte) {
	t.Helper()
	tf := openTmpfile(t, dir, flags, 0o640)
	fd := int(tf.Fd())
	pwriteAll(t, fd, data, 256<<10)
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &st))
	require.Equal(t, uint64(0), uint64(st.Nlink), name)
	require.Equal(t, int64(len(data)), st.Size, name)
	require.Equal(t, uint32(unix.S_IFREG|0o640), st.Mode, name)
	require.NoError(t, unix.Fchown(fd, 1000, 100), name)
	require.NoError(t, unix.Fsync(fd), "fsync of a file with no name")
	if flags == unix.O_RDWR {
		got := make([]byte, len(data))
		k, err := unix.Pread(fd, got, 0)
		require.NoError(t, err)
		require.Equal(t, len(got), k)
		require.True(t, bytes.Equal(data, got), "%s: read back through the descriptor", name)
	}
	p := filepath.Join(dir, name)
	require.NoError(t, linkFd(fd, p), name)
	st2 := stat(t, p)
	require.Equal(t, st.Ino, st2.Ino, name)
	require.Equal(t, uint64(1), uint64(st2.Nlink), name)
	require.Equal(t, uint32(unix.S_IFREG|0o640), st2.Mode, name)
	require.Equal(t, [2]uint32{1000, 100}, [2]uint32{st2.Uid, st2.Gid}, name)
	require.NoError(t, unix.Fstat(fd, &st))
	require.Equal(t, uint64(1), uint64(st.Nlink), "%s: the descriptor sees the name", name)
	// A second linkat is a hard link like any other.
	require.NoError(t, linkFd(fd, p+"-2"), name)
	require.Equal(t, uint64(2), uint64(stat(t, p).Nlink), name)
	require.NoError(t, tf.Close())
	require.True(t, bytes.Equal(data, []byte(read(t, p))), "%s: content after linkat", name)
	require.NoError(t, os.Remove(p+"-2"))
}

// checkTmpfileDirs: a setgid directory gives an O_TMPFILE file its group;
// a removed directory, in which a process still sits, takes no new file.
func checkTmpfileDirs(t *testing.T, d string) {
	t.Helper()
	sgid := filepath.Join(d, "sgid")
	require.NoError(t, os.Mkdir(sgid, 0o755))
	require.NoError(t, os.Chown(sgid, 0, 100))
	require.NoError(t, unix.Chmod(sgid, 0o2775))
	gf := openTmpfile(t, sgid, unix.O_RDWR, 0o600)
	g := int(gf.Fd())
	var gst unix.Stat_t
	require.NoError(t, unix.Fstat(g, &gst))
	require.Equal(t, uint32(100), gst.Gid)
	require.NoError(t, linkFd(g, filepath.Join(sgid, "g")))
	require.Equal(t, uint32(100), stat(t, filepath.Join(sgid, "g")).Gid)
	require.NoError(t, gf.Close())
	require.NoError(t, os.RemoveAll(sgid))
	gone := filepath.Join(d, "gone")
	require.NoError(t, os.Mkdir(gone, 0o755))
	dirFd, err := unix.Open(gone, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	require.NoError(t, os.Remove(gone))
	_, err = unix.Openat(dirFd, ".", unix.O_TMPFILE|unix.O_RDWR, 0o600)
	requireErrno(t, err, unix.ENOENT)
	require.NoError(t, unix.Close(dirFd))

}

// TestTmpfileAsNobody: an unprivileged user makes a file with O_TMPFILE
// and names it with linkat, and owns it.
func TestTmpfileAsNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	needTool(t, "setpriv")
	py := needTool(t, "/usr/bin/python3") // a system one, which nobody can run
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "s", "", MountOptions{AllowOther: true})
	d := m.Dir()
	testuser.Reach(t, filepath.Dir(d))
	require.NoError(t, os.Mkdir(filepath.Join(d, "home"), 0o755))
	require.NoError(t, os.Chown(filepath.Join(d, "home"), nobody, nobody))
	require.NoError(t, os.Mkdir(filepath.Join(d, "root"), 0o755))

	script := `import os, sys
fd = os.open(sys.argv[1], os.O_TMPFILE | os.O_WRONLY, 0o640)
os.write(fd, b"from nobody")
os.fsync(fd)
# A dir_fd makes Python call linkat(2), which follows the link; link(2)
# would not.
os.link("/proc/self/fd/%d" % fd, sys.argv[2], src_dir_fd=os.open(".", os.O_RDONLY), follow_symlinks=True)
os.close(fd)`
	out, err := asNobody(t, d, py+" -c '"+script+"' home home/made")
	require.NoError(t, err, out)
	st := stat(t, filepath.Join(d, "home/made"))
	require.Equal(t, uint32(unix.S_IFREG|0o640), st.Mode)
	require.Equal(t, [2]uint32{nobody, nobody}, [2]uint32{st.Uid, st.Gid})
	require.Equal(t, "from nobody", read(t, filepath.Join(d, "home/made")))

	// Not in a directory nobody may not write.
	out, err = asNobody(t, d, py+" -c '"+script+"' root root/made")
	require.Error(t, err, out)
	require.Contains(t, out, "Permission denied")
}
