package fusefs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestAppendFlagCleared: fcntl(F_SETFL) can take O_APPEND off a
// descriptor after its open, which the daemon is not told of. Through the
// daemon, a pwrite then lands at its offset, as on ext4 (each WRITE
// carries the descriptor's flags). Through a passed-through appender the
// kernel's backing file keeps the flags of the open, so the pwrite still
// appends (a known limit, docs/ARCHITECTURE.md): either way, what the
// mount shows is what a capture, the drop of the backing file and a
// remount keep.
func TestAppendFlagCleared(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		access int
		want   string
	}{
		{"daemon", os.O_RDWR, "XXXXaaaaaa\nbbbbbbbbbb\ncccccccccc\n"},
		{"passthrough", os.O_WRONLY, "aaaaaaaaaa\nbbbbbbbbbb\ncccccccccc\nXXXX"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, m, p := mountedFile(t, "rollout.jsonl")
			require.NoError(t, os.WriteFile(p, []byte("aaaaaaaaaa\nbbbbbbbbbb\n"), 0o644))
			require.Eventually(t, func() bool { return backedOpens(t, e, "s", "rollout.jsonl") == -1 }, 5*time.Second, 10*time.Millisecond)
			w, err := openT(t, p, tc.access|os.O_APPEND, 0)
			require.NoError(t, err)
			pt := backedOpens(t, e, "s", "rollout.jsonl") == 1
			require.Equal(t, tc.access == os.O_WRONLY, pt, "only a write-only appender is passed through")
			_, err = w.WriteString("cccccccccc\n")
			require.NoError(t, err)
			fl, err := unix.FcntlInt(w.Fd(), unix.F_GETFL, 0)
			require.NoError(t, err)
			_, err = unix.FcntlInt(w.Fd(), unix.F_SETFL, fl&^unix.O_APPEND)
			require.NoError(t, err)
			_, err = unix.Pwrite(int(w.Fd()), []byte("XXXX"), 0)
			require.NoError(t, err)
			require.Equal(t, tc.want, read(t, p))
			_, snap := captureMount(t, e, "s")
			require.Equal(t, tc.want, read(t, filepath.Join(snap, "rollout.jsonl")), "the capture")
			require.NoError(t, w.Close())
			require.Eventually(t, func() bool { return backedOpens(t, e, "s", "rollout.jsonl") <= 0 }, 5*time.Second, 10*time.Millisecond)
			for range 3 {
				require.NoError(t, e.Sync(context.Background(), "s"))
			}
			require.Equal(t, -1, backedOpens(t, e, "s", "rollout.jsonl"), "no backing file once closed and idle")
			require.Equal(t, tc.want, read(t, p), "the mount after the drop")
			require.NoError(t, m.Unmount())
			m = MountForTest(t, e, "s", "", MountOptions{})
			require.Equal(t, tc.want, read(t, filepath.Join(m.Dir(), "rollout.jsonl")), "after a remount")
		})
	}
}

// TestMmapThroughAppender: a shared writable mapping made through an
// O_RDWR|O_APPEND descriptor writes pages back where they are mapped,
// not at the end: O_APPEND governs write(2), not the kernel's write-back
// of dirty pages, which reaches the daemon through that descriptor.
func TestMmapThroughAppender(t *testing.T) {
	t.Parallel()
	e, _, p := mountedFile(t, "db")
	content := bytes.Repeat([]byte("0123456789"), 1000)
	require.NoError(t, os.WriteFile(p, content, 0o644))
	require.Equal(t, "ok", runHelperOutput(t, "mmap-at", p, "100", "50", "7", "append"))
	want := append([]byte(nil), content...)
	copy(want[100:], randBytes(7, 50))
	require.Equal(t, want, []byte(read(t, p)), "the mapped pages land where they were mapped")
	_, snap := captureMount(t, e, "s")
	require.Equal(t, want, []byte(read(t, filepath.Join(snap, "db"))))
}

// TestAppendOneWriteEach: an append through a daemon-served O_RDWR|
// O_APPEND descriptor (Codex's rollout) is one WRITE, also where it
// crosses a page boundary, which through the page cache the kernel sends
// as two unless a read made the page whole (the descriptor is
// FOPEN_DIRECT_IO); a reader with a descriptor of its own reads every
// appended byte at once.
func TestAppendOneWriteEach(t *testing.T) {
	t.Parallel()
	obs := &opCounter{}
	e := newTestEngine(t, nil, Options{Observer: obs})
	m := MountForTest(t, e, "s", "", MountOptions{})
	if !m.gate.directMmap() {
		t.Skip("the kernel does not map FOPEN_DIRECT_IO files shared (FUSE_DIRECT_IO_ALLOW_MMAP)")
	}
	p := filepath.Join(m.Dir(), "rollout.jsonl")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	const lines = 200
	before := obs.n[OpWrite].Load()
	total := 0
	for i := range lines {
		l := jsonlLine(i)
		_, err := f.Write(l)
		require.NoError(t, err)
		total += len(l)
	}
	require.Greater(t, total/4096, 10, "the lines cross page boundaries")
	require.Equal(t, int64(lines), obs.n[OpWrite].Load()-before, "WRITE requests")

	tail, err := os.Open(p)
	require.NoError(t, err)
	defer tail.Close()
	for i := lines; i < 2*lines; i++ {
		l := jsonlLine(i)
		_, err := f.Write(l)
		require.NoError(t, err)
		total += len(l)
		got := make([]byte, len(l))
		_, err = tail.ReadAt(got, int64(total-len(l)))
		require.NoError(t, err)
		require.Equal(t, l, got, "line %d read at once", i)
	}
	require.NoError(t, f.Sync())
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(jsonlAll(2*lines), got))
}
