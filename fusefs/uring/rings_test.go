package uring

import (
	"errors"
	"fmt"
	stdlog "log"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/internal/testkit/threadtest"
)

// loopMount mounts go-fuse's loopback of a new directory through Mount.
type loopMount struct {
	dir    string
	server *fuse.Server
	us     *Server
}

func mountLoopback(t *testing.T) loopMount {
	t.Helper()
	return mountWrapped(t, fuse.MountOptions{}, func(raw fuse.RawFileSystem) fuse.RawFileSystem { return raw }, nil)
}

// mountWrapped mounts wrap of go-fuse's loopback of a new directory, with
// mo's options (names and MaxWrite set here), logging the rings' messages
// to log (stderr if nil). The cleanup detaches a mount still busy.
func mountWrapped(t *testing.T, mo fuse.MountOptions, wrap func(fuse.RawFileSystem) fuse.RawFileSystem, log *slog.Logger) loopMount {
	t.Helper()
	under, dir := t.TempDir(), t.TempDir()
	root, err := fs.NewLoopbackRoot(under)
	require.NoError(t, err)
	mo.FsName, mo.Name, mo.MaxWrite = "uringtest", "uringtest", 1<<20
	opts := &fs.Options{MountOptions: mo}
	if log == nil {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	server, us, err := Mount(dir, wrap(fs.NewNodeFS(root, opts)), &opts.MountOptions, log)
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := us.Unmount(); err != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
		server.Wait()
		us.Wait()
	})
	require.True(t, us.Active(), "every entry registered")
	return loopMount{dir, server, us}
}

func skipWithoutURing(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("Mount mounts itself, as root")
	}
	if b, err := os.ReadFile("/sys/module/fuse/parameters/enable_uring"); err != nil || strings.TrimSpace(string(b)) != "Y" {
		t.Skipf("the kernel does not offer FUSE over io_uring here (enable_uring: %q, %v)", b, err)
	}
}

// settle polls until the threads waiting for the kernel are the rings'
// alone: one in io_uring_enter a ring, none on a /dev/fuse.
func settle(t *testing.T, rings int) {
	t.Helper()
	require.NoError(t, threadtest.AwaitRings(rings))
}

// useMount writes, lists and reads back a file through m.
func useMount(t *testing.T, m loopMount, name string) {
	t.Helper()
	p := filepath.Join(m.dir, name)
	require.NoError(t, os.WriteFile(p, []byte(name), 0o644))
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, name, string(got))
	_, err = os.ReadDir(m.dir)
	require.NoError(t, err)
}

// TestRingsShared: every mount of the process is served by the same ring
// threads, one a CPU. With one mount or eight, the threads that wait for
// the kernel are one a ring, in io_uring_enter, and none waits on a
// mount's /dev/fuse (the rings read it); the process gains less than a
// thread a mount. A connection aborted ends its own mount alone: the
// others go on serving, and a mount made after it is served too. The
// ring threads end with the last mount.
func TestRingsShared(t *testing.T) {
	skipWithoutURing(t)
	ncpu, err := possibleCPUs()
	require.NoError(t, err)
	rings := min(ncpu, maxThreads)

	mounts := []loopMount{mountLoopback(t)}
	useMount(t, mounts[0], "first")
	settle(t, rings)
	before, err := threadtest.Threads()
	require.NoError(t, err)
	for len(mounts) < 8 {
		m := mountLoopback(t)
		useMount(t, m, "more")
		mounts = append(mounts, m)
	}
	for i, m := range mounts {
		useMount(t, m, fmt.Sprintf("again%d", i))
		require.Positive(t, m.us.Served())
	}
	settle(t, rings)
	after, err := threadtest.Threads()
	require.NoError(t, err)
	require.Less(t, after-before, len(mounts)-1, "threads with 1 mount: %d, with %d: %d", before, len(mounts), after)

	// Abort one connection (fusectl): that mount ends, the others serve.
	var st unix.Stat_t
	require.NoError(t, unix.Stat(mounts[3].dir, &st))
	if _, err := os.Stat("/sys/fs/fuse/connections"); err != nil {
		t.Skipf("no fusectl here to abort a connection: %v", err)
	}
	// fusectl names a connection by the kernel's dev_t of its superblock.
	abort := fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", unix.Major(st.Dev)<<20|unix.Minor(st.Dev))
	require.NoError(t, os.WriteFile(abort, []byte("1"), 0o200))
	ended := make(chan struct{})
	go func() {
		mounts[3].us.Wait()
		mounts[3].server.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(60 * time.Second):
		t.Fatal("the aborted mount's server did not end")
	}
	_, err = os.ReadDir(mounts[3].dir)
	require.ErrorIs(t, err, syscall.ENOTCONN)
	for i, m := range mounts {
		if i != 3 {
			useMount(t, m, fmt.Sprintf("after%d", i))
		}
	}
	mounts = append(mounts, mountLoopback(t))
	useMount(t, mounts[len(mounts)-1], "new")
	settle(t, rings)

	// The ring threads end with the last mount.
	for _, m := range mounts {
		if err := m.us.Unmount(); err != nil {
			require.NoError(t, syscall.Unmount(m.dir, syscall.MNT_DETACH))
		}
		m.server.Wait()
		m.us.Wait()
	}
	settle(t, 0)
}

// forgetFS counts the FORGETs it is given.
type forgetFS struct {
	fuse.RawFileSystem
	forgets atomic.Int64
}

func (f *forgetFS) Forget(node, nlookup uint64) {
	f.forgets.Add(1)
	f.RawFileSystem.Forget(node, nlookup)
}

// TestRingsForget: the kernel's FORGETs, which it sends through
// /dev/fuse alone, reach the file system through the ring that reads it.
func TestRingsForget(t *testing.T) {
	skipWithoutURing(t)
	ffs := &forgetFS{}
	dir := mountWrapped(t, fuse.MountOptions{}, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		ffs.RawFileSystem = raw
		return ffs
	}, nil).dir
	// An unlinked file's inode leaves the kernel's cache once closed: the
	// kernel forgets it.
	for i := range 20 {
		p := filepath.Join(dir, fmt.Sprintf("f%d", i))
		require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
		require.NoError(t, os.Remove(p))
	}
	deadline := time.Now().Add(30 * time.Second)
	for ffs.forgets.Load() == 0 {
		require.True(t, time.Now().Before(deadline), "no FORGET reached the file system")
		time.Sleep(10 * time.Millisecond)
	}
}

// tidFS records the thread that serves a SETATTR (inline: the ring
// thread) and the one that serves an FSYNC.
type tidFS struct {
	fuse.RawFileSystem
	mu        sync.Mutex
	setattr   int
	fsyncedOn int
}

func (f *tidFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.mu.Lock()
	f.setattr = unix.Gettid()
	f.mu.Unlock()
	return f.RawFileSystem.SetAttr(c, in, out)
}

func (f *tidFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	f.mu.Lock()
	f.fsyncedOn = unix.Gettid()
	f.mu.Unlock()
	return f.RawFileSystem.Fsync(c, in)
}

// TestRingsFsyncShared: an FSYNC is served on the ring thread while the
// ring serves one mount, and by a goroutine once it serves several, so
// that one mount's flush to disk holds up no other mount's requests.
func TestRingsFsyncShared(t *testing.T) {
	skipWithoutURing(t)
	if n, err := possibleCPUs(); err != nil || n > maxThreads {
		t.Skipf("ring threads are not pinned on a host with %d CPUs (%v)", n, err)
	}
	pinToOneCPU(t)
	// Without passthrough, so that an FSYNC reaches the ring.
	tfs := &tidFS{}
	dir := mountWrapped(t, fuse.MountOptions{DisabledCapabilities: fuse.CAP_PASSTHROUGH}, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		tfs.RawFileSystem = raw
		return tfs
	}, nil).dir
	f, err := os.Create(filepath.Join(dir, "f"))
	require.NoError(t, err)
	defer f.Close()
	servedOn := func() (ring, fsync int) {
		require.NoError(t, f.Chmod(0o600))
		_, err := f.WriteAt([]byte("data"), 0)
		require.NoError(t, err)
		require.NoError(t, f.Sync())
		tfs.mu.Lock()
		defer tfs.mu.Unlock()
		return tfs.setattr, tfs.fsyncedOn
	}
	ring, fsync := servedOn()
	require.Equal(t, ring, fsync, "an FSYNC of the ring's one mount, off the ring thread")
	mountLoopback(t)
	ring, fsync = servedOn()
	require.NotEqual(t, ring, fsync, "an FSYNC on the ring thread, with another mount on the ring")
}

// pinToOneCPU keeps the test's requests on one CPU, so that one ring
// serves them all.
func pinToOneCPU(t *testing.T) {
	runtime.LockOSThread()
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	orig := set
	// The thread goes back to the runtime with every CPU it had.
	t.Cleanup(func() {
		_ = unix.SchedSetaffinity(0, &orig)
		runtime.UnlockOSThread()
	})
	cpu := 0
	for !set.IsSet(cpu) {
		cpu++
	}
	set.Zero()
	set.Set(cpu)
	require.NoError(t, unix.SchedSetaffinity(0, &set))
}

// TestRingsMountChurn: mounts made and unmounted, two at a time, while
// other mounts serve a steady stream of requests: the others see no
// error, and every mount made serves.
func TestRingsMountChurn(t *testing.T) {
	skipWithoutURing(t)
	steady := []loopMount{mountLoopback(t), mountLoopback(t)}
	stop := make(chan struct{})
	errs := make(chan error, len(steady))
	for i, m := range steady {
		go func() {
			p := filepath.Join(m.dir, "steady")
			var err error
			for n := 0; err == nil; n++ {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				want := fmt.Sprintf("%d-%d", i, n)
				if err = os.WriteFile(p, []byte(want), 0o644); err == nil {
					var got []byte
					got, err = os.ReadFile(p)
					if err == nil && string(got) != want {
						err = fmt.Errorf("read %q, wrote %q", got, want)
					}
				}
			}
			errs <- err
		}()
	}
	var churn sync.WaitGroup
	churned := make(chan error, 2)
	for range 2 {
		churn.Add(1)
		go func() {
			defer churn.Done()
			var err error
			for n := 0; n < 5 && err == nil; n++ {
				err = mountOnce(t)
			}
			churned <- err
		}()
	}
	churn.Wait()
	close(stop)
	for range steady {
		require.NoError(t, <-errs)
	}
	require.NoError(t, <-churned)
	require.NoError(t, <-churned)
}

// mountOnce mounts a loopback, writes and reads a file through it and
// unmounts it, from any goroutine.
func mountOnce(t *testing.T) error {
	under, dir := t.TempDir(), t.TempDir()
	root, err := fs.NewLoopbackRoot(under)
	if err != nil {
		return err
	}
	opts := &fs.Options{MountOptions: fuse.MountOptions{FsName: "uringtest", Name: "uringtest", MaxWrite: 1 << 20}}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	server, us, err := Mount(dir, fs.NewNodeFS(root, opts), &opts.MountOptions, log)
	if err != nil {
		return err
	}
	p := filepath.Join(dir, "churn")
	err = os.WriteFile(p, []byte("churn"), 0o644)
	if err == nil {
		var got []byte
		if got, err = os.ReadFile(p); err == nil && string(got) != "churn" {
			err = fmt.Errorf("read %q, wrote %q", got, "churn")
		}
	}
	if err == nil && !us.Active() {
		err = fmt.Errorf("%s: not served over io_uring", dir)
	}
	if uerr := us.Unmount(); uerr != nil {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		err = errors.Join(err, uerr)
	}
	server.Wait()
	us.Wait()
	return err
}

// blockFS holds every FALLOCATE (served by a goroutine) until release
// is closed, telling entered when one arrives.
type blockFS struct {
	fuse.RawFileSystem
	entered chan struct{}
	release chan struct{}
}

func (f *blockFS) Fallocate(c <-chan struct{}, in *fuse.FallocateIn) fuse.Status {
	f.entered <- struct{}{}
	<-f.release
	return f.RawFileSystem.Fallocate(c, in)
}

// syncBuffer is a log sink the test reads while the rings write it.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRingsInterrupt: a signal to a thread waiting for a request makes
// the kernel send an INTERRUPT through /dev/fuse, which the ring reading
// it answers; the request still gets the file system's answer (no
// EINTR), and the mount goes on serving.
func TestRingsInterrupt(t *testing.T) {
	skipWithoutURing(t)
	var logs syncBuffer
	bfs := &blockFS{entered: make(chan struct{}, 1), release: make(chan struct{})}
	// Without passthrough, so that the FALLOCATE reaches the ring.
	mo := fuse.MountOptions{Debug: true, Logger: stdlog.New(&logs, "", 0), DisabledCapabilities: fuse.CAP_PASSTHROUGH}
	m := mountWrapped(t, mo, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		bfs.RawFileSystem = raw
		return bfs
	}, slog.New(slog.NewTextHandler(&logs, nil)))
	dir := m.dir
	// Before the unmount (cleanups run last first): a test that failed
	// must not leave the FALLOCATE holding the mount.
	release := sync.OnceFunc(func() { close(bfs.release) })
	t.Cleanup(release)
	f, err := os.Create(filepath.Join(dir, "f"))
	require.NoError(t, err)
	defer f.Close()

	fd := int(f.Fd())
	tids := make(chan int, 1)
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		done <- unix.Fallocate(fd, 0, 0, 4096)
	}()
	tid := <-tids
	<-bfs.entered
	// SIGURG: the Go runtime's own, which it ignores but for preemption.
	require.NoError(t, unix.Tgkill(os.Getpid(), tid, unix.SIGURG))
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), `msg="fuse request on /dev/fuse answered ENOSYS" op=36 `) {
		require.True(t, time.Now().Before(deadline), "no INTERRUPT answered; log:\n%s", logs.String())
		time.Sleep(10 * time.Millisecond)
	}
	release()
	require.NoError(t, <-done, "the interrupted FALLOCATE")
	useMount(t, m, "after")
}

// panicFS panics on every GETATTR of a file named "boom".
type panicFS struct {
	fuse.RawFileSystem
	boom atomic.Uint64 // its node id, once looked up
}

func (p *panicFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	st := p.RawFileSystem.Lookup(cancel, h, name, out)
	if st.Ok() && name == "boom" {
		p.boom.Store(out.NodeId)
	}
	return st
}

func (p *panicFS) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	st := p.RawFileSystem.Create(cancel, in, name, out)
	if st.Ok() && name == "boom" {
		p.boom.Store(out.NodeId)
	}
	return st
}

func (p *panicFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	if in.NodeId != 0 && in.NodeId == p.boom.Load() {
		panic("boom")
	}
	return p.RawFileSystem.GetAttr(cancel, in, out)
}

// TestRingsHandlerPanics: a handler that panics is answered EIO, as
// go-fuse answers it over /dev/fuse, and the mount (and the process)
// goes on serving.
func TestRingsHandlerPanics(t *testing.T) {
	skipWithoutURing(t)
	pfs := &panicFS{}
	var logged strings.Builder
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(b)
	}), nil))
	m := mountWrapped(t, fuse.MountOptions{}, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		pfs.RawFileSystem = raw
		return pfs
	}, log)
	p := filepath.Join(m.dir, "boom")
	require.NoError(t, os.WriteFile(p, []byte("x"), 0o644))
	// The attributes the create returned are cached; AT_STATX_FORCE_SYNC
	// asks the daemon.
	var stx unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, p, unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &stx)
	require.ErrorIs(t, err, syscall.EIO)
	useMount(t, m, "after")
	mu.Lock()
	defer mu.Unlock()
	require.Contains(t, logged.String(), "panicked")
}

// writerFunc is an io.Writer of a function.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
