package fusefs

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// special is one special file of each kind, as the tests make them.
type special struct {
	name string
	mode uint32 // type bits and permissions
	rdev uint64
}

var specials = []special{
	{"fifo", unix.S_IFIFO | 0o640, 0},
	{"null", unix.S_IFCHR | 0o666, unix.Mkdev(1, 3)},
	{"loop", unix.S_IFBLK | 0o600, unix.Mkdev(7, 300)}, // a minor over 255
	{"sock", unix.S_IFSOCK | 0o755, 0},
}

// fixedTimes are the times the tests give special files.
var fixedTimes = []unix.Timespec{{Sec: 1_600_000_000, Nsec: 5}, {Sec: 1_700_000_000, Nsec: 123456789}}

// makeSpecials makes each special file in dir through mknod(2), gives it
// owner 1000:100 and fixedTimes, and links the fifo a second time.
func makeSpecials(t *testing.T, dir string) {
	t.Helper()
	for _, s := range specials {
		p := filepath.Join(dir, s.name)
		require.NoError(t, unix.Mknod(p, s.mode, int(s.rdev)), "mknod %s", s.name)
		// mknod applies the umask.
		require.NoError(t, unix.Fchmodat(unix.AT_FDCWD, p, s.mode&0o7777, 0))
		require.NoError(t, unix.Lchown(p, 1000, 100))
		require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, fixedTimes, unix.AT_SYMLINK_NOFOLLOW))
	}
	require.NoError(t, os.Link(filepath.Join(dir, "fifo"), filepath.Join(dir, "fifo-link")))
}

// checkSpecials checks what makeSpecials made, in dir.
func checkSpecials(t *testing.T, dir string) {
	t.Helper()
	for _, s := range append(specials, special{"fifo-link", unix.S_IFIFO | 0o640, 0}) {
		st := stat(t, filepath.Join(dir, s.name))
		require.Equal(t, s.mode, st.Mode, "%s: mode %o", s.name, st.Mode)
		require.Equal(t, s.rdev, st.Rdev, "%s: rdev", s.name)
		require.Equal(t, uint32(1000), st.Uid, s.name)
		require.Equal(t, uint32(100), st.Gid, s.name)
		require.Equal(t, int64(0), st.Size, s.name)
		require.Equal(t, fixedTimes[1], unix.Timespec(st.Mtim), "%s: mtime", s.name)
		nlink := uint64(1)
		if strings.HasPrefix(s.name, "fifo") {
			nlink = 2
		}
		require.Equal(t, nlink, uint64(st.Nlink), "%s: nlink", s.name)
	}
	require.Equal(t, stat(t, filepath.Join(dir, "fifo")).Ino, stat(t, filepath.Join(dir, "fifo-link")).Ino)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	types := map[string]os.FileMode{}
	for _, e := range ents {
		types[e.Name()] = e.Type()
	}
	require.Equal(t, map[string]os.FileMode{
		"fifo": os.ModeNamedPipe, "fifo-link": os.ModeNamedPipe, "null": os.ModeDevice | os.ModeCharDevice,
		"loop": os.ModeDevice, "sock": os.ModeSocket,
	}, types)
}

// TestSpecialFiles: fifos, sockets and device nodes are entries like any
// other: their mode, owner, device number and times are kept, in the live
// session and through capture, fork, restore and a remount.
func TestSpecialFiles(t *testing.T) {
	e, m := newMount(t)
	ctx := context.Background()
	d := m.Dir()
	makeSpecials(t, d)
	checkSpecials(t, d)
	ctime := unix.Timespec(stat(t, filepath.Join(d, "null")).Ctim)

	_, snap := captureMount(t, e, "s")
	checkSpecials(t, snap)
	require.Equal(t, ctime, unix.Timespec(stat(t, filepath.Join(snap, "null")).Ctim), "ctime kept by capture")
	f := forkMount(t, e, "s", "f")
	checkSpecials(t, f.Dir())
	_, id, err := e.Capture(ctx, "s", "before changes", nil)
	require.NoError(t, err)

	// Rename, unlink and chmod them as any file.
	require.NoError(t, os.Rename(filepath.Join(d, "sock"), filepath.Join(d, "sock2")))
	require.NoError(t, os.Remove(filepath.Join(d, "fifo-link")))
	require.Equal(t, uint64(1), uint64(stat(t, filepath.Join(d, "fifo")).Nlink))
	require.NoError(t, os.Chmod(filepath.Join(d, "null"), 0o600))
	require.NoError(t, os.Rename(filepath.Join(d, "loop"), filepath.Join(d, "null"))) // over another node
	st := stat(t, filepath.Join(d, "null"))
	require.Equal(t, uint32(unix.S_IFBLK|0o600), st.Mode)
	require.Equal(t, unix.Mkdev(7, 300), st.Rdev)
	_, err = os.Lstat(filepath.Join(d, "loop"))
	require.ErrorIs(t, err, os.ErrNotExist)

	require.NoError(t, e.Restore(ctx, "s", id))
	checkSpecials(t, d)

	// A remount reads them back from the stored tree.
	require.NoError(t, m.Unmount())
	m2 := MountForTest(t, e, "s", "", MountOptions{})
	checkSpecials(t, m2.Dir())
	// The fork did not change with its source.
	checkSpecials(t, f.Dir())
}

// TestMknodRegular: mknod of a regular file (mode 0 or S_IFREG) makes an
// empty file, and of an unknown type fails as ext4 does.
func TestMknodRegular(t *testing.T) {
	_, m := newMount(t)
	for i, mode := range []uint32{0o644, unix.S_IFREG | 0o644} {
		p := filepath.Join(m.Dir(), "f"+string(rune('0'+i)))
		require.NoError(t, unix.Mknod(p, mode, 0))
		write(t, p, "x")
		require.Equal(t, "x", read(t, p))
	}
	requireErrno(t, unix.Mknod(filepath.Join(m.Dir(), "bad"), 0o160000|0o644, 0), syscall.EINVAL)
}

// TestSocketOnMount: bind(2) makes a socket file on the mount, and the
// kernel connects a client through it to the listener, as on ext4.
func TestSocketOnMount(t *testing.T) {
	_, m := newMount(t)
	p := filepath.Join(m.Dir(), "dir", "agent.sock")
	require.NoError(t, os.Mkdir(filepath.Dir(p), 0o755))
	l, err := net.Listen("unix", p)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	require.Equal(t, uint32(unix.S_IFSOCK), stat(t, p).Mode&unix.S_IFMT)
	done := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- err
			return
		}
		defer c.Close()
		line, err := bufio.NewReader(c).ReadString('\n')
		if err == nil {
			_, err = c.Write([]byte("echo " + line))
		}
		done <- err
	}()
	c, err := net.Dial("unix", p)
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("hello\n"))
	require.NoError(t, err)
	got, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "echo hello\n", got)
	require.NoError(t, <-done)
	// A second bind to the same path fails as on ext4.
	_, err = net.Listen("unix", p)
	requireErrno(t, err, syscall.EADDRINUSE)
}

// TestFifoBetweenProcesses: a writer process and the test read through a
// fifo on the mount.
func TestFifoBetweenProcesses(t *testing.T) {
	_, m := newMount(t)
	p := filepath.Join(m.Dir(), "pipe")
	require.NoError(t, unix.Mkfifo(p, 0o600))
	w := exec.Command("/bin/sh", "-c", `printf 'through the fifo\n' > "$1"`, "sh", p)
	w.Stderr = os.Stderr
	require.NoError(t, w.Start())
	got := read(t, p) // open blocks until the writer opens its end
	require.NoError(t, w.Wait())
	require.Equal(t, "through the fifo\n", got)
	require.Equal(t, int64(0), stat(t, p).Size)
}

// TestNodev: a mount is nodev unless made with Dev, so a device node on it
// opens no device; with Dev it opens the device.
func TestNodev(t *testing.T) {
	e, m := newMount(t)
	p := filepath.Join(m.Dir(), "null")
	require.NoError(t, unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	_, err := os.OpenFile(p, os.O_WRONLY, 0)
	requireErrno(t, err, syscall.EACCES)

	dev := MountForTest(t, e, "s", "", MountOptions{Dev: true})
	f, err := os.OpenFile(filepath.Join(dev.Dir(), "null"), os.O_RDWR, 0)
	require.NoError(t, err, "open through a dev mount")
	defer f.Close()
	_, err = f.Write([]byte("gone"))
	require.NoError(t, err)
	n, err := f.Read(make([]byte, 8))
	require.Equal(t, 0, n) // /dev/null reads as empty
	require.Error(t, err)
	// A fifo is no device: it opens on a nodev mount.
	fifo := filepath.Join(m.Dir(), "fifo")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	fd, err := unix.Open(fifo, unix.O_RDWR|unix.O_NONBLOCK, 0)
	require.NoError(t, err)
	unix.Close(fd)
}

// TestSpecialFilesAsNobody: an unprivileged user makes fifos and sockets,
// owned by it, but no device node (no CAP_MKNOD): EPERM.
func TestSpecialFilesAsNobody(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	needTool(t, "setpriv")
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "s", "", MountOptions{AllowOther: true})
	d := m.Dir()
	for p := filepath.Dir(d); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	require.NoError(t, os.Mkdir(filepath.Join(d, "tmp"), 0o755))
	require.NoError(t, os.Chmod(filepath.Join(d, "tmp"), 0o1777))

	py := needTool(t, "/usr/bin/python3") // a system one, which nobody can run
	// nobody binds a socket, connects to it and is answered through it.
	script := `import socket
l = socket.socket(socket.AF_UNIX)
l.bind("tmp/sock")
l.listen(1)
c = socket.socket(socket.AF_UNIX)
c.connect("tmp/sock")
a, _ = l.accept()
c.sendall(b"ok")
print(a.recv(2).decode())`
	out, err := asNobody(t, d, "mkfifo tmp/pipe && "+py+" -c '"+script+"'")
	require.NoError(t, err, out)
	require.Equal(t, "ok", out)
	for _, name := range []string{"pipe", "sock"} {
		st := stat(t, filepath.Join(d, "tmp", name))
		require.Equal(t, uint32(nobody), st.Uid, name)
		require.Equal(t, uint32(nobody), st.Gid, name)
	}
	out, err = asNobody(t, d, "mknod tmp/null c 1 3")
	require.Error(t, err, out)
	require.Contains(t, out, "Operation not permitted")
	_, err = os.Lstat(filepath.Join(d, "tmp", "null"))
	require.ErrorIs(t, err, os.ErrNotExist)

	// A fifo read and written by nobody on both ends.
	out, err = asNobody(t, d, "(printf 'from nobody' > tmp/pipe &) ; cat tmp/pipe")
	require.NoError(t, err, out)
	require.Equal(t, "from nobody", out)
}

// TestHasCap: the daemon's own check for CAP_MKNOD reads a process's
// effective capabilities: root has it, nobody has none.
func TestHasCap(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	needTool(t, "setpriv")
	require.True(t, hasCap(uint32(os.Getpid()), capMknod))
	// setpriv changes its credentials before it runs the shell, so the
	// shell's line means the process is nobody's.
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c", "echo ready; exec sleep 60")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	waitLine(t, bufio.NewReader(out), "ready")
	require.False(t, hasCap(uint32(cmd.Process.Pid), capMknod))
	require.False(t, hasCap(0, capMknod))
}
