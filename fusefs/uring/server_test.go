package uring

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
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
		s := &Server{fs: fuse.NewDefaultRawFileSystem(), log: t.Logf}
		mem := make([]byte, 4096+16384)
		e := &entry{hdr: mem[:hdrSize], payload: mem[4096:]}
		h := (*fuse.InHeader)(unsafe.Pointer(&e.in[0]))
		h.Opcode, h.NodeId, h.Unique, h.TotalExtlen = op, 1, 77, extlen
		copy(e.in[inHeaderSize:], opIn)
		copy(e.payload, payload)
		require.True(t, s.serve(e, uint32(n), true))
		oh := (*fuse.OutHeader)(unsafe.Pointer(&e.hdr[hdrInOut]))
		require.Equal(t, uint64(77), oh.Unique)
		sz := *(*uint32)(unsafe.Pointer(&e.hdr[hdrEntInOut+16]))
		require.LessOrEqual(t, int(sz), len(e.payload))
		require.Equal(t, uint32(outHeaderSize)+sz, oh.Length)
		if oh.Status != 0 {
			require.Zero(t, sz)
			require.Less(t, oh.Status, int32(0))
		}
	})
}

// splitFS has local data at offsets below 4096 and the rest "on a
// remote": its local view answers EAGAIN there, and only splitFS itself
// serves it. wrote is what its last WRITE carried.
type splitFS struct {
	fuse.RawFileSystem
	wrote *string
}

func (fs splitFS) Local() fuse.RawFileSystem { return localSplit{fs} }

func (splitFS) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	return fuse.ReadResultData([]byte("fetched")), fuse.OK
}

func (fs splitFS) Write(_ <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	*fs.wrote = string(data)
	return uint32(len(data)), fuse.OK
}

type localSplit struct{ splitFS }

func (localSplit) Read(_ <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if in.Offset >= 4096 {
		return nil, fuse.Status(syscall.EAGAIN)
	}
	return fuse.ReadResultData([]byte("local")), fuse.OK
}

func (fs localSplit) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if in.Offset >= 4096 {
		return 0, fuse.Status(syscall.EAGAIN)
	}
	return fs.splitFS.Write(c, in, data)
}

// TestServeOffRing: on the ring thread a READ or WRITE of a LocalServer
// is served by its local view where it can be, and otherwise left
// unanswered for a goroutine, which then serves it, the WRITE with the
// data the request carried.
func TestServeOffRing(t *testing.T) {
	var wrote string
	fs := splitFS{fuse.NewDefaultRawFileSystem(), &wrote}
	s := &Server{fs: fs, local: fs.Local(), log: t.Logf}
	mem := make([]byte, 4096+16384)
	e := &entry{hdr: mem[:hdrSize], payload: mem[4096:]}
	reply := func() string {
		oh := (*fuse.OutHeader)(unsafe.Pointer(&e.hdr[hdrInOut]))
		return string(e.payload[:oh.Length-uint32(min(outHeaderSize, int(oh.Length)))])
	}
	read := func(off uint64, inline bool) (bool, string) {
		clear(e.hdr)
		rin := (*fuse.ReadIn)(unsafe.Pointer(&e.in[0]))
		*rin = fuse.ReadIn{InHeader: fuse.InHeader{Opcode: opRead, NodeId: 2, Unique: 9}, Offset: off, Size: 100}
		answered := s.serve(e, 0, inline)
		return answered, reply()
	}
	answered, got := read(0, true)
	require.True(t, answered)
	require.Equal(t, "local", got)
	answered, got = read(8192, true)
	require.False(t, answered, "a read that needs the remote, answered on the ring thread")
	require.Empty(t, got, "a reply written for a read left to a goroutine")
	answered, got = read(8192, false)
	require.True(t, answered)
	require.Equal(t, "fetched", got)

	write := func(off uint64, inline bool) bool {
		clear(e.hdr)
		win := (*fuse.WriteIn)(unsafe.Pointer(&e.in[0]))
		*win = fuse.WriteIn{InHeader: fuse.InHeader{Opcode: opWrite, NodeId: 2, Unique: 10}, Offset: off, Size: 11}
		copy(e.payload, "hello world")
		return s.serve(e, 11, inline)
	}
	require.False(t, write(8192, true), "a write that needs the remote, answered on the ring thread")
	require.Empty(t, wrote)
	require.Equal(t, "hello world", string(e.payload[:11]), "the data of a write left to a goroutine, overwritten")
	require.True(t, s.serve(e, 11, false))
	require.Equal(t, "hello world", wrote)
	require.True(t, write(0, true))
	require.Equal(t, "hello world", wrote)
}

// TestURingMount serves go-fuse's loopback file system through Mount, with
// no homefs above it: the kernel's requests come through the rings, what
// was written reaches the directory underneath, Unmount does nothing the
// second time, and the rings let go of the mount once it has ended.
func TestURingMount(t *testing.T) {
	skipWithoutURing(t)
	under, dir := t.TempDir(), t.TempDir()
	root, err := fs.NewLoopbackRoot(under)
	require.NoError(t, err)
	opts := &fs.Options{MountOptions: fuse.MountOptions{FsName: "uringtest", Name: "uringtest", MaxWrite: 1 << 20}}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	server, us, err := Mount(dir, fs.NewNodeFS(root, opts), &opts.MountOptions, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = us.Unmount()
		server.Wait()
		us.Wait()
	})
	require.True(t, us.Active(), "every entry registered")

	p := filepath.Join(dir, "a")
	require.NoError(t, os.WriteFile(p, []byte("hello"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	require.NoError(t, os.Rename(p, filepath.Join(dir, "d", "b")))
	got, err := os.ReadFile(filepath.Join(dir, "d", "b"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
	names, err := os.ReadDir(filepath.Join(dir, "d"))
	require.NoError(t, err)
	require.Len(t, names, 1)
	require.Greater(t, us.Served(), int64(8))

	require.NoError(t, us.Unmount())
	require.NoError(t, us.Unmount(), "a second Unmount does nothing")
	server.Wait()
	us.Wait() // returns once the rings hold nothing of the mount's
	got, err = os.ReadFile(filepath.Join(under, "d", "b"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(got))
}

// policyFS records which thread serves a SETATTR (a ring thread: inline),
// and, while a FALLOCATE is served (by a goroutine: deferred), the
// scheduling policy of that ring thread.
type policyFS struct {
	fuse.RawFileSystem
	mu      sync.Mutex
	ringTid int
	away    uint32
}

func (p *policyFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	p.mu.Lock()
	p.ringTid = unix.Gettid()
	p.mu.Unlock()
	return p.RawFileSystem.SetAttr(c, in, out)
}

func (p *policyFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	a, err := unix.SchedGetAttr(p.ringTid, 0)
	if err != nil {
		return fuse.ToStatus(err)
	}
	p.away = a.Policy
	return p.RawFileSystem.Fallocate(c, in)
}

// TestRingThreadBatch: a pinned ring thread waits for requests as
// SCHED_BATCH, but as SCHED_NORMAL after a WRITE and while a request of
// it is out with a goroutine.
func TestRingThreadBatch(t *testing.T) {
	skipWithoutURing(t)
	if n, err := possibleCPUs(); err != nil || n > maxThreads {
		t.Skipf("ring threads are not pinned on a host with %d CPUs (%v)", n, err)
	}
	// The requests of this test come from one CPU, so one ring serves
	// them all.
	pinToOneCPU(t)
	var pfs *policyFS
	// Without passthrough, so that a WRITE reaches the ring.
	dir := mountWrapped(t, fuse.MountOptions{DisabledCapabilities: fuse.CAP_PASSTHROUGH}, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		pfs = &policyFS{RawFileSystem: raw}
		return pfs
	}, nil).dir

	f, err := os.Create(filepath.Join(dir, "f"))
	require.NoError(t, err)
	defer f.Close()
	// The ring thread sets the policy it waits with before it sends the
	// reply, so each is known once the call returned.
	waits := func() uint32 {
		pfs.mu.Lock()
		defer pfs.mu.Unlock()
		a, err := unix.SchedGetAttr(pfs.ringTid, 0)
		require.NoError(t, err)
		return a.Policy
	}
	require.NoError(t, f.Chmod(0o600))
	require.Equal(t, uint32(unix.SCHED_BATCH), waits(), "after a SETATTR")
	_, err = f.WriteAt([]byte("data"), 0)
	require.NoError(t, err)
	require.Equal(t, uint32(unix.SCHED_NORMAL), waits(), "after a WRITE")
	require.NoError(t, f.Chmod(0o644))
	require.Equal(t, uint32(unix.SCHED_BATCH), waits(), "after a SETATTR again")
	require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, 4096))
	pfs.mu.Lock()
	away := pfs.away
	pfs.mu.Unlock()
	require.Equal(t, uint32(unix.SCHED_NORMAL), away, "while a goroutine serves a request")
	require.Equal(t, uint32(unix.SCHED_BATCH), waits(), "once the goroutine answered")
}
