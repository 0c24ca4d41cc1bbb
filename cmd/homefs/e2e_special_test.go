package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSpecialFilesCLI: fifos, sockets and device nodes made on a mount are
// captured, diffed, exported (sockets left out, as GNU tar leaves them)
// and imported (device nodes only with --devices); a device node opens its
// device only through a --dev mount.
func TestSpecialFilesCLI(t *testing.T) {
	e, src := startMounted(t, "src")
	require.NoError(t, unix.Mkfifo(filepath.Join(src, "pipe"), 0o640))
	require.NoError(t, unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	require.NoError(t, unix.Chmod(filepath.Join(src, "null"), 0o666)) // past the umask
	l, err := net.Listen("unix", filepath.Join(src, "agent.sock"))
	require.NoError(t, err)
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	require.NoError(t, l.Close())
	snap := strings.TrimSpace(e.ok("capture", "s"))

	require.NoError(t, os.Remove(filepath.Join(src, "pipe")))
	d := e.ok("diff", snap, "s")
	require.Regexp(t, `-\s+fifo\s+-\s+pipe`, d)
	require.NotContains(t, d, "null")

	tarOut := e.ok("export", snap, "-")
	names := tarNames(t, []byte(tarOut))
	require.Contains(t, names, "pipe")
	require.Contains(t, names, "null")
	require.NotContains(t, names, "agent.sock")

	r := e.runStdin([]byte(tarOut), "import", "-", "no-devices")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, `"null" is a device node`)
	e.fails(exitNotFound, "no such session", "log", "no-devices")
	out := e.runStdinOK([]byte(tarOut), "import", "--devices", "-", "imported")
	require.Contains(t, out, "2 special files")
	d = e.ok("diff", snap, "imported")
	require.Regexp(t, `-\s+socket\s+-\s+agent.sock`, d)
	require.NotContains(t, d, "pipe")
	require.NotContains(t, d, "null")

	// nodev unless --dev.
	plain, dev := e.mkdir("plain"), e.mkdir("dev")
	e.ok("mount", "imported", plain)
	e.ok("mount", "--dev", "imported", dev)
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(plain, "null"), &st))
	require.Equal(t, uint32(unix.S_IFCHR|0o666), st.Mode)
	require.Equal(t, unix.Mkdev(1, 3), st.Rdev)
	_, err = os.OpenFile(filepath.Join(plain, "null"), os.O_WRONLY, 0)
	require.ErrorIs(t, err, syscall.EACCES)
	f, err := os.OpenFile(filepath.Join(dev, "null"), os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("discarded")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.NoError(t, unix.Lstat(filepath.Join(plain, "pipe"), &st))
	require.Equal(t, uint32(unix.S_IFIFO|0o640), st.Mode)
}
