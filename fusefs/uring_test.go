package fusefs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"homefs/cas"
	"homefs/internal/catalog"
)

func TestCPUCount(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-1\n": 2, "0-3,8-11": 12, "0,2,5": 6} {
		n, err := cpuCount(in)
		require.NoError(t, err, in)
		require.Equal(t, want, n, in)
	}
	for _, bad := range []string{"", "x", "3-1", "-1", "0-", "0-70000"} {
		_, err := cpuCount(bad)
		require.Error(t, err, "%q", bad)
	}
}

// TestURingServes mounts over FUSE over io_uring and checks that the
// kernel's requests came through the rings, and that the ring threads end
// with the mount. The rest of the suite runs over the rings too with
// HOMEFS_FUSE_URING=1 (make test).
func TestURingServes(t *testing.T) {
	if _, err := hostURing.read(); err != nil {
		t.Skipf("no FUSE over io_uring here: %v", err)
	}
	store := cas.NewMemory()
	e := New(store, catalog.New(store), Options{
		StoreDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		URing:    URingOn,
	})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	if os.Getenv("HOMEFS_FUSE_URING") == "0" {
		t.Skip("HOMEFS_FUSE_URING=0")
	}
	m := MountForTest(t, e, "s", "", MountOptions{})
	require.Equal(t, "io_uring", m.Transport())
	d := m.Dir()

	// One of each kind of request the rings decode.
	p := filepath.Join(d, "a")
	require.NoError(t, os.WriteFile(p, []byte("hello"), 0o640))
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(" world")
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	got := make([]byte, 64)
	n, err := f.ReadAt(got, 0)
	require.ErrorIs(t, err, io.EOF) // a read past the end of the file
	require.Equal(t, "hello world", string(got[:n]))
	require.NoError(t, f.Close())
	require.NoError(t, os.Mkdir(filepath.Join(d, "dir"), 0o755))
	require.NoError(t, os.Rename(p, filepath.Join(d, "dir", "b")))
	require.NoError(t, os.Symlink("dir/b", filepath.Join(d, "l")))
	target, err := os.Readlink(filepath.Join(d, "l"))
	require.NoError(t, err)
	require.Equal(t, "dir/b", target)
	require.NoError(t, unix.Setxattr(filepath.Join(d, "dir", "b"), "user.k", []byte("v"), 0))
	size, err := unix.Getxattr(filepath.Join(d, "dir", "b"), "user.k", nil)
	require.NoError(t, err)
	require.Equal(t, 1, size)
	names, err := os.ReadDir(filepath.Join(d, "dir"))
	require.NoError(t, err)
	require.Len(t, names, 1)
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(d, &st))
	b, err := os.ReadFile(filepath.Join(d, "l"))
	require.NoError(t, err)
	require.Equal(t, "hello world", string(b))

	us := m.uring
	require.Greater(t, us.served(), int64(20))
	require.NoError(t, m.Unmount())
	us.wait() // returns once every ring thread has ended
}

// FuzzURingServe feeds the ring decoder requests of any shape, answered by
// go-fuse's default file system (ENOSYS to everything): whatever the
// kernel wrote, the reply stays inside the entry's buffers, carries the
// request's unique, and an error reply carries no payload.
func FuzzURingServe(f *testing.F) {
	f.Add(uint32(opLookup), uint16(0), []byte{}, []byte("name\x00"), 5)
	f.Add(uint32(opRename2), uint16(0), make([]byte, 16), []byte("a\x00b\x00"), 4)
	f.Add(uint32(opSymlink), uint16(0), []byte{}, []byte("link\x00target"), 11)
	f.Add(uint32(opWrite), uint16(1), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, []byte("123456789"), 9)
	f.Add(uint32(opGetxattr), uint16(0), []byte{0, 1}, []byte("user.x"), 6)
	f.Add(uint32(opSetxattr), uint16(0), []byte{3}, []byte("user.x\x00abc"), 10)
	f.Add(uint32(opReaddirplus), uint16(0), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10}, []byte{}, 0)
	f.Add(uint32(opRead), uint16(0), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, []byte{}, 1<<30)
	f.Fuzz(func(t *testing.T, op uint32, extlen uint16, opIn, payload []byte, n int) {
		s := &uringServer{fs: fuse.NewDefaultRawFileSystem(), log: t.Logf}
		mem := make([]byte, 4096+16384)
		e := &uringEnt{hdr: mem[:uringHdrSize], payload: mem[4096:]}
		h := (*fuse.InHeader)(unsafe.Pointer(&e.in[0]))
		h.Opcode, h.NodeId, h.Unique, h.TotalExtlen = op, 1, 77, extlen
		copy(e.in[inHeaderSize:], opIn)
		copy(e.payload, payload)
		s.serve(e, uint32(n))
		oh := (*fuse.OutHeader)(unsafe.Pointer(&e.hdr[uringHdrInOut]))
		require.Equal(t, uint64(77), oh.Unique)
		sz := *(*uint32)(unsafe.Pointer(&e.hdr[uringHdrEntInOut+16]))
		require.LessOrEqual(t, int(sz), len(e.payload))
		require.Equal(t, uint32(outHeaderSize)+sz, oh.Length)
		if oh.Status != 0 {
			require.Zero(t, sz)
			require.Less(t, oh.Status, int32(0))
		}
	})
}
