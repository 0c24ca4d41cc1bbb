package fusefs

// A file already passed through (a staged writer, an appender) is joined
// by an O_RDWR open, which must be passthrough too, and that open maps it
// shared and writable: the mapping writes the backing file directly. A
// store into a page already dirty faults no more and changes no time, so
// no fingerprint shows it, and a mapping outlives its descriptor's close.
// The daemon reads such a file whole while a mapping may write it, and
// keeps its backing file until none can (backing.mappable); otherwise
// each test below loses its second store.

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// joinAndMap makes p's file an appender's (13 bytes written), joins it
// with an O_RDWR open and maps that shared and writable.
func joinAndMap(t *testing.T, e *Engine, p string) (w, rw *os.File, mem []byte) {
	t.Helper()
	w = appender(t, p)
	_, err := w.WriteString("0123456789abc")
	require.NoError(t, err)
	rw, err = openT(t, p, os.O_RDWR, 0)
	require.NoError(t, err)
	require.Equal(t, 2, backedOpens(t, e, "s", "f"))
	mem, err = unix.Mmap(int(rw.Fd()), 0, 13, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	return w, rw, mem
}

// releasedAndFlushed waits until the kernel has released every handle of
// "f" (releases are asynchronous) and flushes three times, as far as a
// closed backing file's drop goes.
func releasedAndFlushed(t *testing.T, e *Engine) {
	t.Helper()
	require.Eventually(t, func() bool { return backedOpens(t, e, "s", "f") == 0 }, 5*time.Second, 10*time.Millisecond)
	for range 3 {
		require.NoError(t, e.Sync(context.Background(), "s"))
	}
}

// TestMmapJoinSamePageAfterCapture: an O_RDWR open joins an appender's
// passthrough (wild backing file) and maps the file shared; a store into a
// page already dirty after a capture changes no fingerprint.
func TestMmapJoinSamePageAfterCapture(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "f")
	w, rw, mem := joinAndMap(t, e, p)
	mem[0] = 'M'
	_, snap := captureMount(t, e, "s")
	require.Equal(t, "M123456789abc", read(t, filepath.Join(snap, "f")))
	mem[1] = 'N' // same page, already dirty and writable: no fault, no time update
	_, snap = captureMount(t, e, "s")
	got := read(t, filepath.Join(snap, "f"))
	require.NoError(t, unix.Munmap(mem))
	require.NoError(t, rw.Close())
	require.NoError(t, w.Close())
	releasedAndFlushed(t, e)
	live := read(t, p)
	_, snap = captureMount(t, e, "s")
	final := read(t, filepath.Join(snap, "f"))
	require.Equal(t, "MN23456789abc", got, "second capture")
	require.Equal(t, "MN23456789abc", live, "live")
	require.Equal(t, "MN23456789abc", final, "final")
}

// TestMmapJoinOutlivesClose: a mapping made through an O_RDWR open that
// joined a passthrough file outlives its close; stores after the daemon
// dropped the backing file go nowhere.
func TestMmapJoinOutlivesClose(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "f")
	w, rw, mem := joinAndMap(t, e, p)
	mem[0] = 'M'
	require.NoError(t, rw.Close())
	require.NoError(t, w.Close())
	releasedAndFlushed(t, e)
	require.Equal(t, 0, backedOpens(t, e, "s", "f"), "kept while the mapping may write it")
	mem[5] = 'Z'
	require.NoError(t, unix.Msync(mem, unix.MS_SYNC))
	require.NoError(t, unix.Munmap(mem))
	live := read(t, p)
	_, snap := captureMount(t, e, "s")
	final := read(t, filepath.Join(snap, "f"))
	require.Equal(t, "M1234Z6789abc", live, "live")
	require.Equal(t, "M1234Z6789abc", final, "capture")
	for range 3 {
		require.NoError(t, e.Sync(context.Background(), "s"))
	}
	require.Equal(t, -1, backedOpens(t, e, "s", "f"), "dropped once no mapping can write it")
	require.Equal(t, "M1234Z6789abc", read(t, p), "after the drop")
}

// TestMmapJoinStatBetweenStores: as TestMmapJoinSamePageAfterCapture,
// with a stat (ls -l) rather than a capture between the two stores.
func TestMmapJoinStatBetweenStores(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "f")
	w, rw, mem := joinAndMap(t, e, p)
	mem[0] = 'M'
	_, err := os.Stat(p)
	require.NoError(t, err)
	mem[1] = 'N'
	require.NoError(t, unix.Munmap(mem))
	require.NoError(t, rw.Close())
	require.NoError(t, w.Close())
	releasedAndFlushed(t, e)
	require.Equal(t, -1, backedOpens(t, e, "s", "f"), "dropped")
	live := read(t, p)
	_, snap := captureMount(t, e, "s")
	final := read(t, filepath.Join(snap, "f"))
	require.Equal(t, "MN23456789abc", live, "live")
	require.Equal(t, "MN23456789abc", final, "capture")
}

// TestMmapJoinStaged: an O_RDWR open joins a staged writer's passthrough
// and maps the file; a store after a capture into a page already dirty is
// never absorbed.
func TestMmapJoinStaged(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "f")
	w, err := openT(t, p, os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	n := fileNodeOf(t, e, "s", "f")
	n.mu.Lock()
	staged := n.data.backing != nil && n.data.backing.isStaged()
	n.mu.Unlock()
	require.True(t, staged, "staged")
	_, err = w.WriteString("0123456789abc")
	require.NoError(t, err)
	rw, err := openT(t, p, os.O_RDWR, 0)
	require.NoError(t, err)
	require.Equal(t, 2, backedOpens(t, e, "s", "f"))
	mem, err := unix.Mmap(int(rw.Fd()), 0, 13, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	mem[0] = 'M'
	_, snap := captureMount(t, e, "s")
	require.Equal(t, "M123456789abc", read(t, filepath.Join(snap, "f")))
	mem[1] = 'N'
	require.NoError(t, unix.Munmap(mem))
	require.NoError(t, rw.Close())
	require.NoError(t, w.Close())
	// Dropped by a flush once the kernel released the mapping's open.
	require.Eventually(t, func() bool {
		return e.Sync(context.Background(), "s") == nil && backedOpens(t, e, "s", "f") == -1
	}, 10*time.Second, 10*time.Millisecond)
	live := read(t, p)
	_, snap = captureMount(t, e, "s")
	final := read(t, filepath.Join(snap, "f"))
	require.Equal(t, "MN23456789abc", live, "live")
	require.Equal(t, "MN23456789abc", final, "capture")
}
