package fusefs

import (
	"os"
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
