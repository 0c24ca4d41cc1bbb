package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// openT opens path and closes it when the test ends, so that a failing
// test never leaves a file of its own mount open when the process exits.
func openT(t *testing.T, path string, flags int, mode os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flags, mode)
	if err == nil {
		t.Cleanup(func() { f.Close() })
	}
	return f, err
}

// mountedFile mounts a new session "s" of a fresh engine and returns the
// path of name in it.
func mountedFile(t *testing.T, name string) (*Engine, *Mount, string) {
	t.Helper()
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "s", "", MountOptions{})
	return e, m, filepath.Join(m.Dir(), name)
}

// appender opens path as a write-only appender (creating it), the open
// that gets passthrough.
func appender(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := openT(t, path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	return f
}

// fileNodeOf returns the node of the file at path of live session s.
func fileNodeOf(t *testing.T, e *Engine, session, path string) *node {
	t.Helper()
	s, err := e.live(context.Background(), session)
	require.NoError(t, err)
	n, err := s.walkFile(context.Background(), path)
	require.NoError(t, err)
	return n
}

// backedOpens returns how many passthrough handles the file at path of
// session s has open, or -1 when it has no backing file.
func backedOpens(t *testing.T, e *Engine, session, path string) int {
	t.Helper()
	n := fileNodeOf(t, e, session, path)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.data.backing == nil {
		return -1
	}
	return n.data.backing.opens
}

// TestPassthroughAppend: a write-only appender's writes go to the backing
// file; readers opened meanwhile see them at once, a capture holds them,
// and once no one has the file open a flush drops the backing file.
func TestPassthroughAppend(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "rollout.jsonl")
	// Created by the appender: an earlier open's release reaches the daemon
	// after its close returns, and until then the node is not passed
	// through.
	w := appender(t, p)
	require.Equal(t, 1, backedOpens(t, e, "s", "rollout.jsonl"), "a write-only appender gets passthrough")
	want := []byte("{\"n\":0}\n")
	_, err := w.Write(want)
	require.NoError(t, err)
	r, err := openT(t, p, os.O_RDONLY, 0) // opened while the appender is: passthrough too
	require.NoError(t, err)
	require.Equal(t, 2, backedOpens(t, e, "s", "rollout.jsonl"))
	for i := 1; i <= 100; i++ {
		line := fmt.Sprintf("{\"n\":%d,\"pad\":%q}\n", i, bytes.Repeat([]byte("x"), i*7))
		_, err := w.WriteString(line)
		require.NoError(t, err)
		want = append(want, line...)
		if i%10 == 0 {
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.Equal(t, int64(len(want)), st.Size(), "the size is current at once")
			got := make([]byte, len(want)+10)
			k, err := r.ReadAt(got, 0)
			require.Equal(t, len(want), k, "%v", err)
			require.Equal(t, string(want), string(got[:k]), "an open reader sees the appends")
		}
	}
	// A second appender in the same mount shares the backing file.
	w2, err := openT(t, p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = w2.WriteString("second\n")
	require.NoError(t, err)
	want = append(want, "second\n"...)
	require.NoError(t, w2.Close())

	_, snap := captureMount(t, e, "s")
	require.Equal(t, string(want), read(t, filepath.Join(snap, "rollout.jsonl")), "the capture holds every append")
	require.NoError(t, w.Sync())
	require.NoError(t, r.Close())
	require.NoError(t, w.Close())
	// The kernel releases closed files asynchronously.
	require.Eventually(t, func() bool { return backedOpens(t, e, "s", "rollout.jsonl") == 0 }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, e.Sync(context.Background(), "s"))
	require.Equal(t, 0, backedOpens(t, e, "s", "rollout.jsonl"), "kept by the flush after its last append, for the next appender")
	require.NoError(t, e.Sync(context.Background(), "s"))
	require.Equal(t, -1, backedOpens(t, e, "s", "rollout.jsonl"), "dropped by a flush that finds it closed and idle")
	require.Equal(t, string(want), read(t, p))

	// After the capture the appends go on; a fork holds them too.
	w, err = openT(t, p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = w.WriteString("after\n")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	want = append(want, "after\n"...)
	fm := forkMount(t, e, "s", "fork")
	require.Equal(t, string(want), read(t, filepath.Join(fm.Dir(), "rollout.jsonl")))
	require.Equal(t, string(want), read(t, p))
}

// TestPassthroughMixedOpens: opens that may write anywhere while the file
// is passed through are passed through too, and what they write reaches
// captures; an appender arriving while a daemon-served open exists goes
// through the daemon.
func TestPassthroughMixedOpens(t *testing.T) {
	t.Parallel()
	e, m, p := mountedFile(t, "f")
	w := appender(t, p)
	_, err := w.WriteString("0123456789abc")
	require.NoError(t, err)
	rw, err := openT(t, p, os.O_RDWR, 0)
	require.NoError(t, err, "the kernel takes a second open only as passthrough")
	require.Equal(t, 2, backedOpens(t, e, "s", "f"))
	_, err = rw.WriteAt([]byte("XY"), 3)
	require.NoError(t, err)
	// A shared writable mapping writes past what the daemon sees, too.
	mem, err := unix.Mmap(int(rw.Fd()), 0, 13, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	mem[0] = 'M'
	require.NoError(t, unix.Msync(mem, unix.MS_SYNC))
	require.NoError(t, unix.Munmap(mem))
	_, snap := captureMount(t, e, "s")
	require.Equal(t, "M12XY56789abc", read(t, filepath.Join(snap, "f")))
	// Truncating through an appender: later appends land at the new end.
	require.NoError(t, w.Truncate(5))
	_, err = w.WriteString("!")
	require.NoError(t, err)
	require.Equal(t, "M12XY!", read(t, p))
	require.NoError(t, rw.Close())
	require.NoError(t, w.Close())
	_, snap = captureMount(t, e, "s")
	require.Equal(t, "M12XY!", read(t, filepath.Join(snap, "f")))

	// A daemon-served open first: the appender is served by the daemon too.
	q := filepath.Join(m.Dir(), "g")
	write(t, q, "g")
	// Once the writer's release arrived, a flush drops its staging file.
	require.Eventually(t, func() bool {
		require.NoError(t, e.Sync(context.Background(), "s"))
		return backedOpens(t, e, "s", "g") == -1
	}, 5*time.Second, 10*time.Millisecond)
	r, err := openT(t, q, os.O_RDONLY, 0)
	require.NoError(t, err)
	a, err := openT(t, q, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	require.Equal(t, -1, backedOpens(t, e, "s", "g"))
	_, err = a.WriteString("h")
	require.NoError(t, err)
	got := make([]byte, 4)
	k, _ := r.ReadAt(got, 0)
	require.Equal(t, "gh", string(got[:k]))
	require.NoError(t, a.Close())
	require.NoError(t, r.Close())

	// Setuid files are never passed through (the kernel would not drop the
	// bit on write).
	require.NoError(t, unix.Chmod(q, 0o4755))
	require.Eventually(t, func() bool { return backedOpens(t, e, "s", "g") == -1 }, 5*time.Second, 10*time.Millisecond)
	a, err = openT(t, q, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	require.Equal(t, -1, backedOpens(t, e, "s", "g"))
	require.NoError(t, a.Close())
	s, err := e.live(context.Background(), "s")
	require.NoError(t, err)
	g, err := s.walkFile(context.Background(), "g")
	require.NoError(t, err)
	g.mu.Lock()
	kind := g.eligible(syscall.O_WRONLY | syscall.O_APPEND)
	g.mu.Unlock()
	require.Equal(t, routeDaemon, kind, "whatever the other opens, a setuid file is not passed through")
}

// TestPassthroughOpenWriteClose: Pi's pattern, an open, one write and a
// close per entry, with a reader re-opening the file and captures in
// between: every capture holds a prefix of whole entries.
func TestPassthroughOpenWriteClose(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "session.jsonl")
	var want []byte
	for i := range 60 {
		f := appender(t, p)
		line := fmt.Sprintf("{\"id\":%d}\n", i)
		_, err := f.WriteString(line)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		want = append(want, line...)
		require.Equal(t, string(want), read(t, p))
		if i%20 == 19 {
			_, snap := captureMount(t, e, "s")
			require.Equal(t, string(want), read(t, filepath.Join(snap, "session.jsonl")))
		}
	}
}

// TestPassthroughConcurrentCapture: an appender and a reader race captures;
// every snapshot holds a byte prefix of the final file, and the reader
// always sees a prefix.
func TestPassthroughConcurrentCapture(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "r.jsonl")
	w := appender(t, p)
	var all []byte
	for i := range 3000 {
		all = append(all, fmt.Sprintf("{\"i\":%d,\"text\":\"%s\"}\n", i, bytes.Repeat([]byte("y"), i%300))...)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	done := make(chan struct{})
	go func() {
		defer wg.Done()
		defer close(done)
		for off := 0; off < len(all); {
			end := bytes.IndexByte(all[off:], '\n') + off + 1
			if _, err := w.Write(all[off:end]); err != nil {
				t.Error(err)
				return
			}
			off = end
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := os.ReadFile(p)
			if err != nil || !isPrefix(b, all) {
				t.Errorf("reader saw %d bytes, not a prefix (%v)", len(b), err)
				return
			}
		}
	}()
	var snaps []string
	for range 5 {
		_, id, err := e.Capture(context.Background(), "s", "", nil)
		require.NoError(t, err)
		snaps = append(snaps, id)
	}
	wg.Wait()
	require.NoError(t, w.Close())
	for _, id := range snaps {
		b, err := os.ReadFile(filepath.Join(mountSnapshot(t, e, id), "r.jsonl"))
		if os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err)
		require.True(t, isPrefix(b, all), "snapshot %s holds %d bytes, not a prefix", id, len(b))
	}
	require.Equal(t, string(all), read(t, p))
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, int64(len(all)), st.Size())
}

// TestPassthroughOpenCloseRace: appenders and readers opening and closing
// one file from many goroutines (releases racing opens) never get an error,
// and every appended line is there at the end.
func TestPassthroughOpenCloseRace(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "race.jsonl")
	const writers, lines = 4, 150
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range lines {
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
				if err != nil {
					t.Errorf("open for append: %v", err)
					return
				}
				_, err = fmt.Fprintf(f, "{\"w\":%d,\"i\":%d}\n", w, i)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range lines {
				b, err := os.ReadFile(p)
				if err != nil && !os.IsNotExist(err) {
					t.Errorf("read: %v", err)
					return
				}
				_ = b
			}
		}()
	}
	wg.Wait()
	got := read(t, p)
	for w := range writers {
		for i := range lines {
			require.Contains(t, got, fmt.Sprintf("{\"w\":%d,\"i\":%d}\n", w, i))
		}
	}
	_, snap := captureMount(t, e, "s")
	require.Equal(t, got, read(t, filepath.Join(snap, "race.jsonl")))
}

// TestPassthroughDurability: appends through passthrough that were fsynced
// survive a kill -9 of the daemon (they went through the journal), and the
// daemon really held a backing file for them.
func TestPassthroughDurability(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	storeDir, mnt := d.storeDir, d.mnt
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "sessions"), 0o755))
	p := filepath.Join(mnt, "sessions/t.jsonl")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	require.NoError(t, err)
	var want []byte
	for i := range 200 {
		line := fmt.Sprintf("{\"type\":\"message\",\"i\":%d}\n", i)
		_, err := f.WriteString(line)
		require.NoError(t, err)
		want = append(want, line...)
		if i%50 == 49 {
			require.NoError(t, f.Sync())
		}
	}
	links := backingLinks(t, d.cmd.Process.Pid, storeDir)
	require.NotEmpty(t, links, "the daemon holds a backing file for the appender")
	_, err = f.WriteString("not synced\n")
	require.NoError(t, err)

	d.kill(t)
	f.Close() // ENOTCONN: the daemon is gone

	m := d.remount(t)
	got := read(t, filepath.Join(m.Dir(), "sessions/t.jsonl"))
	require.True(t, isPrefix(want, []byte(got)), "every fsynced append is back (%d bytes, want at least %d)", len(got), len(want))
	require.True(t, len(got) == len(want) || got == string(want)+"not synced\n", "the rest is whole or absent")
}

// backingLinks lists the backing files process pid has open.
func backingLinks(t *testing.T, pid int, storeDir string) []string {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(dir, fd.Name())); err == nil && strings.HasPrefix(l, filepath.Join(storeDir, "backing")) {
			out = append(out, l)
		}
	}
	return out
}

// TestPassthroughRestore: a restore while an appender is passed through
// leaves the appender writing to the file it opened, which the restored
// tree no longer names, as for any open file; new opens see the snapshot.
func TestPassthroughRestore(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "log")
	w := appender(t, p)
	_, err := w.WriteString("a\n")
	require.NoError(t, err)
	id, _ := captureMount(t, e, "s")
	_, err = w.WriteString("b\n")
	require.NoError(t, err)
	require.NoError(t, e.Restore(context.Background(), "s", id))
	_, err = w.WriteString("c\n")
	require.NoError(t, err, "the open file still takes writes")
	require.Equal(t, "a\n", read(t, p), "the restored file is the snapshot's")
	require.NoError(t, w.Close())
	_, snap := captureMount(t, e, "s")
	require.Equal(t, "a\n", read(t, filepath.Join(snap, "log")))
	a, err := openT(t, p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = a.WriteString("d\n")
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.Equal(t, "a\nd\n", read(t, p))
}

// TestAppenderKept: a transcript written an entry at a time, each through
// an open of its own (Pi), keeps its backing file across the flushes that
// take its entries, so that an entry costs its own bytes, not a copy of
// the file; a flush that finds it closed and idle drops it.
func TestAppenderKept(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "session.jsonl")
	ctx := context.Background()
	write(t, p, "{\"type\":\"session\"}\n")
	// Once the writer's release arrived, a flush drops its staging file.
	require.Eventually(t, func() bool {
		require.NoError(t, e.Sync(ctx, "s"))
		return backedOpens(t, e, "s", "session.jsonl") == -1
	}, 5*time.Second, 10*time.Millisecond)
	want := "{\"type\":\"session\"}\n"
	n := fileNodeOf(t, e, "s", "session.jsonl")
	current := func() *backing {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.data.backing
	}
	var first *backing
	for i := range 3 {
		f := appender(t, p)
		line := fmt.Sprintf("{\"entry\":%d}\n", i)
		_, err := f.WriteString(line)
		require.NoError(t, err)
		want += line
		require.NoError(t, f.Close())
		require.Eventually(t, func() bool { return backedOpens(t, e, "s", "session.jsonl") == 0 }, 5*time.Second, time.Millisecond)
		b := current()
		if first == nil {
			first = b
		}
		require.Same(t, first, b, "entry %d appended to the same backing file", i)
		_, snap := captureMount(t, e, "s")
		require.Equal(t, want, read(t, filepath.Join(snap, "session.jsonl")), "the capture holds entry %d", i)
	}
	require.NoError(t, e.Sync(ctx, "s"))
	require.Equal(t, -1, backedOpens(t, e, "s", "session.jsonl"), "dropped once idle for a flush")
	require.Equal(t, want, read(t, p))
}
