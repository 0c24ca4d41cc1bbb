package fusefs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestKillKeepsNamespaceChanges: changes of names and attributes made
// since the durable head, never fsynced, survive a kill -9 of the daemon
// with the writes made after them (jops.go): new directories, files
// written through O_RDWR, a rename over an existing file, a directory
// moved, a hard link, a symlink, a fifo, an unlink and an rmdir, chmod,
// chown, utimes, truncate, fallocate and xattrs. After the restart the
// tree is what stat, readlink, getxattr and read showed before the kill,
// times included.
func TestKillKeepsNamespaceChanges(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	p := func(name string) string { return filepath.Join(d.mnt, name) }
	require.NoError(t, writeSync(d.mnt, "old/kept", []byte("in the durable head\n")))
	require.NoError(t, writeSync(d.mnt, "old/replaced", []byte("replaced by a rename\n")))
	require.NoError(t, writeSync(d.mnt, "old/gone", []byte("unlinked\n")))
	require.NoError(t, os.Mkdir(p("old/emptydir"), 0o755))
	require.NoError(t, syncDir(d.mnt))

	// From here on nothing is fsynced, and the daemon never flushes.
	require.NoError(t, os.MkdirAll(p("new/a/b"), 0o750))
	f, err := os.OpenFile(p("new/a/b/rollout.jsonl"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	require.NoError(t, err)
	for i := range 50 {
		_, err := fmt.Fprintf(f, "{\"n\":%d}\n", i)
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	rewrite := func(name string, data []byte) {
		g, err := os.OpenFile(p(name), os.O_RDWR|os.O_CREATE, 0o644)
		require.NoError(t, err)
		_, err = g.WriteAt(data, 0)
		require.NoError(t, err)
		require.NoError(t, g.Close())
	}
	rewrite("new/config.json.tmp", []byte(`{"model":"x"}`))
	require.NoError(t, os.Rename(p("new/config.json.tmp"), p("old/replaced")))
	require.NoError(t, os.Rename(p("new/a"), p("moved")))
	require.NoError(t, os.Link(p("moved/b/rollout.jsonl"), p("old/link")))
	require.NoError(t, os.Symlink("../moved/b/rollout.jsonl", p("new/latest")))
	require.NoError(t, unix.Mkfifo(p("new/fifo"), 0o640))
	require.NoError(t, os.Remove(p("old/gone")))
	require.NoError(t, os.Remove(p("old/emptydir")))
	require.NoError(t, os.Chmod(p("old/kept"), 0o604))
	require.NoError(t, os.Chown(p("old/kept"), 1234, 5678))
	require.NoError(t, unix.Setxattr(p("old/kept"), "user.origin", []byte("test"), 0))
	require.NoError(t, unix.Setxattr(p("moved"), "user.dir", []byte("d"), 0))
	rewrite("new/sparse", bytes.Repeat([]byte("s"), 5000))
	require.NoError(t, os.Truncate(p("new/sparse"), 100<<10))
	g, err := os.OpenFile(p("new/sparse"), os.O_RDWR, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Fallocate(int(g.Fd()), unix.FALLOC_FL_KEEP_SIZE|unix.FALLOC_FL_PUNCH_HOLE, 1000, 2000))
	_, err = g.WriteAt([]byte("after the hole"), 50<<10)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	require.NoError(t, os.Chtimes(p("new/fifo"), time0, time0))
	// The last change: written after every other, so it comes back only
	// if all of them do (a replay applies a prefix).
	rewrite("moved/b/last", []byte("last\n"))

	before := snapshotTree(t, d.mnt)
	d.kill(t)
	m := d.remount(t)
	after := snapshotTree(t, m.Dir())
	require.Equal(t, before, after)
	require.Contains(t, before, "moved/b/last")
}

var time0 = time.Unix(1_700_000_000, 123_456_789)

// snapshotTree describes every entry under dir as stat, readlink,
// getxattr and read show it (the inode number aside: a new daemon gives
// new ones).
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode %o uid %d gid %d nlink %d size %d mtime %d.%09d ctime %d.%09d",
			st.Mode, st.Uid, st.Gid, st.Nlink, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" content %x", sha256.Sum256(b))
		case unix.S_IFLNK:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		buf := make([]byte, 4096)
		if k, err := unix.Llistxattr(path, buf); err == nil && k > 0 {
			names := bytes.Split(bytes.TrimRight(buf[:k], "\x00"), []byte{0})
			sort.Slice(names, func(i, j int) bool { return bytes.Compare(names[i], names[j]) < 0 })
			for _, name := range names {
				v := make([]byte, 4096)
				n, err := unix.Lgetxattr(path, string(name), v)
				if err != nil {
					return err
				}
				desc += fmt.Sprintf(" %s=%q", name, v[:n])
			}
		}
		out[rel] = desc
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestKillKeepsPassedThroughWrites: bytes the kernel passed through to
// backing files, which the daemon never saw, survive a kill -9 of the
// daemon (liveBacking): Pi's and Claude Code's transcript entries (open
// O_WRONLY|O_APPEND, write, close, never fsynced), and an appender still
// open. A writer that outlived the daemon gets an error, never silent
// success into a file no one reads.
func TestKillKeepsPassedThroughWrites(t *testing.T) {
	t.Parallel()
	needStaging(t)
	d := startDurable(t)
	p := func(name string) string { return filepath.Join(d.mnt, name) }
	require.NoError(t, os.MkdirAll(p("sessions"), 0o755))
	var transcript []byte
	for i := range 20 {
		line := []byte(fmt.Sprintf("{\"type\":\"message\",\"n\":%d}\n", i))
		f, err := os.OpenFile(p("sessions/pi.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		require.NoError(t, err)
		_, err = f.Write(line)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		transcript = append(transcript, line...)
	}
	app, err := os.OpenFile(p("sessions/claude.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer app.Close()
	_, err = app.Write([]byte("first\nsecond\n"))
	require.NoError(t, err)
	named, err := os.ReadDir(backingDir(d.storeDir, "d"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(named), 2, "the appenders' backing files are named")

	d.kill(t)
	m := d.remount(t)
	require.Equal(t, string(transcript), read(t, filepath.Join(m.Dir(), "sessions/pi.jsonl")))
	require.Equal(t, "first\nsecond\n", read(t, filepath.Join(m.Dir(), "sessions/claude.jsonl")))

	// The writers' descriptors outlived the daemon: a write fails (the
	// connection is gone; where something kept it, the backing file is
	// sealed), never succeeds into a file no one reads.
	for _, f := range []*os.File{app} {
		_, err := f.Write([]byte("after the daemon died"))
		require.True(t, errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.EPERM), "write after the daemon died: %v", err)
	}
}
