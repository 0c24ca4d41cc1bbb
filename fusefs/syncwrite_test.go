package fusefs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestSyncWritesDurable: a write through a descriptor opened O_SYNC or
// O_DSYNC is durable when it returns, as after an fsync: the daemon is
// killed (kill -9) right after such writes and a new one shows them.
// Files are created and their directory fsynced first (O_SYNC makes a
// file's writes durable, not its name).
func TestSyncWritesDurable(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	cases := []struct {
		name  string
		flags int
		old   string // fsynced content before the open
	}{
		{"new-wronly-sync", unix.O_WRONLY | unix.O_SYNC, ""},                       // staged: passed through
		{"new-wronly-dsync", unix.O_WRONLY | unix.O_DSYNC, ""},                     // staged: passed through
		{"append-dsync", unix.O_WRONLY | unix.O_APPEND | unix.O_DSYNC, "line 0\n"}, // an appender: passed through
		{"rdwr-sync", unix.O_RDWR | unix.O_SYNC, "0123456789\n"},                   // served by the daemon
	}
	want := map[string]string{}
	for _, c := range cases {
		require.NoError(t, writeSync(d.mnt, c.name, []byte(c.old)))
	}
	require.NoError(t, syncDir(d.mnt))
	for _, c := range cases {
		fd, err := unix.Open(filepath.Join(d.mnt, c.name), c.flags|unix.O_CLOEXEC, 0)
		require.NoError(t, err, c.name)
		data := []byte("written " + c.name + "\n")
		off := int64(0)
		if c.flags&unix.O_APPEND != 0 {
			off = int64(len(c.old))
		}
		_, err = unix.Write(fd, data)
		require.NoError(t, err, c.name)
		got := []byte(c.old)
		if int(off)+len(data) > len(got) {
			got = append(got[:off], make([]byte, int(off)+len(data)-len(got[:off]))...)
		}
		copy(got[off:], data)
		want[c.name] = string(got)
		// Left open: the kill comes with the descriptors open, as a
		// crash would.
		t.Cleanup(func() { unix.Close(fd) })
	}
	d.kill(t)
	m := d.remount(t)
	for _, c := range cases {
		got, err := os.ReadFile(filepath.Join(m.Dir(), c.name))
		require.NoError(t, err, c.name)
		assert.Equal(t, want[c.name], string(got), "%s: what a synchronous write wrote survives", c.name)
	}
}

// TestSyncCommandDurable: `sync MOUNT` (coreutils' sync with an operand:
// an fsync of the mount's root) makes every file of the session durable,
// written or not through that directory: a 3 MB and a small file, never
// fsynced themselves, survive a kill -9 of the daemon. syncfs(2),
// `sync -f` and sync(2) cannot: Linux sends FUSE_SYNCFS only to virtiofs,
// so nothing of them reaches a daemon (docs/ARCHITECTURE.md, Known limits).
func TestSyncCommandDurable(t *testing.T) {
	t.Parallel()
	syncBin, err := exec.LookPath("sync")
	if err != nil {
		t.Skip("no sync command")
	}
	d := startDurable(t)
	big := randBytes(31, 3<<20)
	require.NoError(t, os.WriteFile(filepath.Join(d.mnt, "big"), big, 0o644))
	require.NoError(t, os.MkdirAll(filepath.Join(d.mnt, "dir"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(d.mnt, "dir", "small"), []byte("small\n"), 0o644))
	out, err := exec.Command(syncBin, d.mnt).CombinedOutput()
	require.NoError(t, err, "sync %s: %s", d.mnt, out)
	d.kill(t)
	m := d.remount(t)
	got, err := os.ReadFile(filepath.Join(m.Dir(), "big"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, got), "big: %d bytes, want %d", len(got), len(big))
	got, err = os.ReadFile(filepath.Join(m.Dir(), "dir", "small"))
	require.NoError(t, err)
	require.Equal(t, "small\n", string(got))
}
