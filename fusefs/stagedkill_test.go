package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestKillKeepsStagedWrites: bytes written through staged files, which
// the kernel passes through to staging files the daemon never reads
// until it absorbs them, survive a kill -9 of the daemon, never fsynced
// (liveBacking, dropRecords): a `cmd > file` still open, written before
// and after the journal was reset by a flush (resetJournal); an
// appender held open across the same reset; and a tree of small files
// written as tar writes them, closed, whose staging files the absorber
// recycled for the next files (so a replay must not read a recycled
// file for an earlier one's content).
func TestKillKeepsStagedWrites(t *testing.T) {
	t.Parallel()
	needStaging(t)
	d := startDurable(t, "200ms")
	p := func(name string) string { return filepath.Join(d.mnt, name) }

	out, err := os.OpenFile(p("out.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	defer out.Close()
	log, err := os.OpenFile(p("app.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer log.Close()
	var outWant, logWant []byte
	put := func(f *os.File, want *[]byte, data []byte) {
		_, err := f.Write(data)
		require.NoError(t, err)
		*want = append(*want, data...)
	}
	put(out, &outWant, randBytes(1, 300<<10))
	put(log, &logWant, []byte("before the reset\n"))

	// The periodic flush moves the head and resets the journal, dropping
	// the records that named the two files.
	waitJournalReset(t, d.storeDir)
	put(out, &outWant, randBytes(2, 200<<10))
	put(log, &logWant, []byte("after the reset\n"))

	tree := map[string][]byte{}
	require.NoError(t, os.Mkdir(p("tree"), 0o755))
	for i := range 300 {
		name := fmt.Sprintf("tree/f%03d", i)
		data := randBytes(uint64(100+i), 1+i*97%9000)
		f, err := os.OpenFile(p(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		require.NoError(t, f.Chmod(0o640))
		require.NoError(t, f.Close())
		tree[name] = data
	}
	put(out, &outWant, []byte("last line, never synced\n"))

	d.kill(t)
	m := d.remount(t)
	at := func(name string) string { return filepath.Join(m.Dir(), name) }
	require.True(t, bytes.Equal(outWant, []byte(read(t, at("out.log")))), "cmd > file: every byte written")
	require.Equal(t, string(logWant), read(t, at("app.log")), "the appender: every line")
	for name, want := range tree {
		got, err := os.ReadFile(at(name))
		require.NoError(t, err, name)
		require.True(t, bytes.Equal(want, got), "%s: %d bytes, want %d", name, len(got), len(want))
		require.Equal(t, uint32(0o640), stat(t, at(name)).Mode&0o777, name)
	}
}

// waitJournalReset waits until session "d"'s journal under storeDir was
// reset (its header, which carries the nonce of its incarnation, changed).
func waitJournalReset(t *testing.T, storeDir string) {
	t.Helper()
	header := func() []byte {
		f, err := os.Open(journalPath(storeDir, "d"))
		if err != nil {
			return nil
		}
		defer f.Close()
		b := make([]byte, journalHeaderLen)
		if _, err := f.ReadAt(b, 0); err != nil {
			return nil
		}
		return b
	}
	first := header()
	require.Eventually(t, func() bool {
		h := header()
		return h != nil && first != nil && !bytes.Equal(h, first)
	}, 30*time.Second, 10*time.Millisecond, "a flush reset the journal")
}

// TestUnlinkedFileKeepsJournal: changes of a file no name leads to (open
// and unlinked, as SQLite's and many temporary files are) need no record,
// and leave the journal taking every other change: a chmod, truncate and
// fallocate of such a file, then a write elsewhere, and the write survives
// a kill -9 (before, they stopped the journal until the next flush, and a
// kill lost the write).
func TestUnlinkedFileKeepsJournal(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	p := func(name string) string { return filepath.Join(d.mnt, name) }
	write(t, p("tmp"), "scratch")
	f, err := os.OpenFile(p("tmp"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, os.Remove(p("tmp")))
	// A flush (the fsync of a directory) resets the journal: the unlinked
	// file has no journal id in the new incarnation, nor a path to bind.
	dir, err := os.Open(d.mnt)
	require.NoError(t, err)
	require.NoError(t, dir.Sync())
	require.NoError(t, dir.Close())
	require.NoError(t, f.Chmod(0o600))
	require.NoError(t, f.Truncate(3))
	require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, 8192))
	write(t, p("after"), "written after the unlinked file's changes")

	d.kill(t)
	m := d.remount(t)
	require.Equal(t, "written after the unlinked file's changes", read(t, filepath.Join(m.Dir(), "after")))
	_, err = os.Stat(filepath.Join(m.Dir(), "tmp"))
	require.True(t, os.IsNotExist(err), "the unlinked file is gone: %v", err)
}

// dieAfterCommit, in a durable daemon's store directory, makes it kill
// itself once a flush has moved the head, before the journal's reset.
const dieAfterCommit = "die-after-commit"

// TestKillBetweenCommitAndReset: a daemon that dies after a flush moved
// the head and before it reset the journal leaves a journal of the old
// head, whose records the new head holds, but not the bytes of a staged
// file still open, which a periodic flush does not absorb: the next
// block (journalNext) brings them back.
func TestKillBetweenCommitAndReset(t *testing.T) {
	t.Parallel()
	needStaging(t)
	d := startDurable(t, "100ms")
	out, err := os.OpenFile(filepath.Join(d.mnt, "out.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	defer out.Close()
	want := randBytes(5, 700<<10)
	_, err = out.Write(want)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(d.storeDir, dieAfterCommit), nil, 0o600))
	// A change for the next flush. The flush of the changes above may come
	// first (a slow machine) and die there: the mkdir then finds the
	// connection gone, and that flush is the one under test.
	err = os.Mkdir(filepath.Join(d.mnt, "dirty"), 0o755)
	made := err == nil
	if !made {
		require.True(t, errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ENOTCONN), "mkdir: %v", err)
	}
	select {
	case <-d.exited:
	case <-time.After(time.Minute):
		t.Fatal("the daemon did not die at the flush's commit")
	}
	require.NoError(t, unix.Unmount(d.mnt, unix.MNT_DETACH))

	m := d.remount(t)
	require.True(t, bytes.Equal(want, []byte(read(t, filepath.Join(m.Dir(), "out.log")))), "every byte of the open staged file")
	if made {
		require.DirExists(t, filepath.Join(m.Dir(), "dirty"), "the head the flush made")
	}
}
