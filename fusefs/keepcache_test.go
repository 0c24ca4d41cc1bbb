package fusefs

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The kernel keeps a file's cached pages across opens while its content is
// unchanged (FOPEN_KEEP_CACHE), and drops them at the next open after any
// change, wherever it came from. residentAfterOpen tells which happened:
// it opens the file (the open that keeps or drops), maps it and counts the
// pages the kernel holds, without reading any.

const cachedSize = 64 << 10 // 16 pages

// cachedVersion returns cachedSize bytes of version v: the same length for
// every v, so that a stale page cache shows as old bytes rather than as a
// size the kernel trusts.
func cachedVersion(v byte) []byte {
	return []byte(strings.Repeat(string(rune('a'+v)), cachedSize))
}

// residentAfterOpen opens path read-only and returns how many of its pages
// are in the page cache right after the open.
func residentAfterOpen(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	st, err := f.Stat()
	require.NoError(t, err)
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	vec := make([]byte, (len(mem)+os.Getpagesize()-1)/os.Getpagesize())
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0])))
	require.Zero(t, errno, "mincore")
	k := 0
	for _, v := range vec {
		k += int(v & 1)
	}
	return k
}

// rewriteInPlace writes data over path at 0 through an O_RDWR descriptor
// (served by the daemon).
func rewriteInPlace(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt(data, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// storedFile writes version v of a file at rel in mount m and syncs the
// session, so that the daemon, not a staging file, serves its reads.
func storedFile(t *testing.T, e *Engine, m *Mount, rel string, v byte) string {
	t.Helper()
	p := filepath.Join(m.Dir(), rel)
	require.NoError(t, os.WriteFile(p, cachedVersion(v), 0o644))
	settled(t, e, rel)
	return p
}

// settled waits until the kernel released every handle of rel in session
// "s" (releases are asynchronous), then flushes, which drops in up to three flushes a backing
// file no handle uses: the daemon serves the file's next opens.
func settled(t *testing.T, e *Engine, rel string) {
	t.Helper()
	require.Eventually(t, func() bool { return backedOpens(t, e, "s", rel) <= 0 }, 5*time.Second, time.Millisecond)
	noWriters(t, e, rel)
	for range 3 { // as far as a closed backing file's drop goes
		require.NoError(t, e.Sync(context.Background(), "s"))
	}
	require.Equal(t, -1, backedOpens(t, e, "s", rel), "the flush dropped the backing file")
}

// noWriters waits until the daemon saw every writer of rel close: a
// release reaches it after the close returned, and until then no open
// keeps pages (fnode.open).
func noWriters(t *testing.T, e *Engine, rel string) {
	t.Helper()
	n := fileNodeOf(t, e, "s", rel)
	require.Eventually(t, func() bool {
		for _, s := range e.liveSessions() {
			if s.writing.has(n) {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}

// TestKeepCacheUnchanged: a second open of an unchanged file keeps the
// pages the first one read; a read-only snapshot's files too.
func TestKeepCacheUnchanged(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	p := storedFile(t, e, m, "f", 0)
	require.Equal(t, string(cachedVersion(0)), read(t, p))
	require.Equal(t, cachedSize/os.Getpagesize(), residentAfterOpen(t, p), "the second open keeps the pages")

	_, snap := captureMount(t, e, "s")
	sp := filepath.Join(snap, "f")
	require.Equal(t, string(cachedVersion(0)), read(t, sp))
	require.Equal(t, cachedSize/os.Getpagesize(), residentAfterOpen(t, sp))
}

// TestKeepCacheChanges: after every kind of change, in the mount that
// cached the file or in another mount of the session, the next open drops
// the cached pages and reads the new bytes.
func TestKeepCacheChanges(t *testing.T) {
	t.Parallel()
	changes := []struct {
		name  string
		other bool // made through a second mount of the session
		apply func(t *testing.T, e *Engine, p string, v byte)
	}{
		{"write O_RDWR, same mount", false, func(t *testing.T, _ *Engine, p string, v byte) { rewriteInPlace(t, p, cachedVersion(v)) }},
		{"write O_RDWR, other mount", true, func(t *testing.T, _ *Engine, p string, v byte) { rewriteInPlace(t, p, cachedVersion(v)) }},
		{"staged rewrite (O_TRUNC), other mount", true, func(t *testing.T, _ *Engine, p string, v byte) {
			require.NoError(t, os.WriteFile(p, cachedVersion(v), 0o644))
		}},
		{"staged rewrite, absorbed, other mount", true, func(t *testing.T, e *Engine, p string, v byte) {
			require.NoError(t, os.WriteFile(p, cachedVersion(v), 0o644))
			require.NoError(t, e.Sync(context.Background(), "s"))
		}},
		{"passthrough append then truncate back, other mount", true, func(t *testing.T, _ *Engine, p string, v byte) {
			w := appender(t, p)
			_, err := w.Write(cachedVersion(v)[:10])
			require.NoError(t, err)
			require.NoError(t, w.Close())
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			require.NoError(t, err)
			require.NoError(t, f.Truncate(cachedSize))
			_, err = f.WriteAt(cachedVersion(v), 0)
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
		{"fallocate punch hole then rewrite, other mount", true, func(t *testing.T, _ *Engine, p string, v byte) {
			f, err := os.OpenFile(p, os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096))
			_, err = f.WriteAt(cachedVersion(v), 0)
			require.NoError(t, err)
		}},
		{"write through a shared mapping, other mount", true, func(t *testing.T, _ *Engine, p string, v byte) {
			require.Equal(t, "ok", runHelperOutput(t, "mmap-fill", p, fmt.Sprint(cachedSize), fmt.Sprint(v)))
		}},
	}
	for _, c := range changes {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, a := newMount(t)
			p := storedFile(t, e, a, "f", 0)
			writer := p
			if c.other {
				b := MountForTest(t, e, "s", "", MountOptions{})
				writer = filepath.Join(b.Dir(), "f")
			}
			for v := byte(1); v <= 3; v++ {
				// A node keeps no pages while it has a backing file; a
				// flush drops those with no open left.
				settled(t, e, "f")
				// The kernel drops its pages when it learns of a new
				// mtime (auto_inval_data): before it caches them here.
				stat(t, p)
				require.Equal(t, string(cachedVersion(v-1)), read(t, p))
				require.Equal(t, cachedSize/os.Getpagesize(), residentAfterOpen(t, p), "unchanged: kept")
				c.apply(t, e, writer, v)
				require.Equal(t, string(cachedVersion(v)), read(t, p), "version %d read after the change", v)
			}
		})
	}
}

// TestKeepCacheRestore: a restore, to an older snapshot and back to a
// newer one, drops the pages the mount cached of the file it replaces,
// whose content has the same length.
func TestKeepCacheRestore(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx := context.Background()
	p := storedFile(t, e, m, "f", 0)
	_, id0, err := e.Capture(ctx, "s", "v0", nil)
	require.NoError(t, err)
	rewriteInPlace(t, p, cachedVersion(1))
	_, id1, err := e.Capture(ctx, "s", "v1", nil)
	require.NoError(t, err)
	for _, step := range []struct {
		id string
		v  byte
	}{{id0, 0}, {id1, 1}, {id0, 0}} {
		noWriters(t, e, "f")
		require.Equal(t, cachedSize/os.Getpagesize(), func() int {
			read(t, p)
			return residentAfterOpen(t, p)
		}())
		require.NoError(t, e.Restore(ctx, "s", step.id))
		require.Equal(t, string(cachedVersion(step.v)), read(t, p))
	}
}

// TestKeepCacheMapping: a reader's shared mapping in one mount (in a
// process of its own: the daemon must not fault on its own mount) shows
// what another mount wrote once the reader's mount opens the file again.
func TestKeepCacheMapping(t *testing.T) {
	t.Parallel()
	e, a := newMount(t)
	p := storedFile(t, e, a, "f", 0)
	b := MountForTest(t, e, "s", "", MountOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := helper(ctx, "mmap-watch", p, fmt.Sprint(cachedSize))
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outPipe, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	defer cmd.Wait()
	defer in.Close()
	out := bufio.NewReader(outPipe)
	waitLine(t, out, "a")
	fmt.Fprintln(in, "reopen") // an open that keeps the pages
	waitLine(t, out, "a")

	rewriteInPlace(t, filepath.Join(b.Dir(), "f"), cachedVersion(1))
	fmt.Fprintln(in, "reopen")
	waitLine(t, out, "b")
}

// helperMmapFill: PATH SIZE V maps the file shared and writable, fills it
// with cachedVersion(V), msyncs, unmaps and prints "ok".
func helperMmapFill(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("mmap-fill PATH SIZE V")
	}
	size, _ := strconv.Atoi(args[1])
	v, _ := strconv.Atoi(args[2])
	f, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	copy(mem, cachedVersion(byte(v)))
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	fmt.Println("ok")
	return unix.Munmap(mem)
}

// helperMmapWatch: PATH SIZE maps the file shared and read-only and
// prints what the mapping holds (its byte if every byte is the same, else
// "mixed"), then again after each line "reopen" on stdin, for which it
// first reads the file through a new descriptor.
func helperMmapWatch(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("mmap-watch PATH SIZE")
	}
	size, _ := strconv.Atoi(args[1])
	f, err := os.Open(args[0])
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	defer unix.Munmap(mem)
	show := func() {
		if strings.Count(string(mem), string(mem[:1])) == len(mem) {
			fmt.Println(string(mem[:1]))
		} else {
			fmt.Println("mixed")
		}
	}
	show()
	lines := bufio.NewScanner(os.Stdin)
	for lines.Scan() {
		if _, err := os.ReadFile(args[0]); err != nil {
			return err
		}
		show()
	}
	return lines.Err()
}
