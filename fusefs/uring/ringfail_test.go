package uring

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// onCPU runs f on a thread of its own pinned to cpu (the thread ends
// with it, pinned) and returns f's error; ok is false if f has not
// returned within d.
func onCPU(cpu int, d time.Duration, f func() error) (err error, ok bool) {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the pinned thread ends
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	select {
	case err := <-done:
		return err, true
	case <-time.After(d):
		return nil, false
	}
}

// TestRingFails: a ring whose io_uring fails (here its descriptor is
// swapped for /dev/null, so that io_uring_enter fails) aborts the
// connections it served, whose requests from its CPU would otherwise
// wait for ever: a process on that CPU gets an error (ENOTCONN), the mounts' servers
// end, and a mount made afterwards gets rings of its own and is served.
func TestRingFails(t *testing.T) {
	skipWithoutURing(t)
	ncpu, err := possibleCPUs()
	require.NoError(t, err)
	if ncpu < 2 || ncpu > maxThreads {
		t.Skipf("%d CPUs: the test wants a ring a CPU, at least two", ncpu)
	}
	mounts := []loopMount{mountLoopback(t), mountLoopback(t)}
	for _, m := range mounts {
		useMount(t, m, "x")
	}
	pool.mu.Lock()
	set := pool.cur
	pool.mu.Unlock()
	r := set.rings[0]
	null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	broken := make(chan error, 1)
	r.post(func(m *ringMail) {
		m.onRing = append(m.onRing, func() { broken <- unix.Dup3(null, r.io.fd, unix.O_CLOEXEC) })
	}) // the ring's next io_uring_enter fails
	require.NoError(t, <-broken)
	require.NoError(t, unix.Close(null))

	for _, m := range mounts {
		err, ok := onCPU(r.cpu, 30*time.Second, func() error {
			_, err := os.Stat(filepath.Join(m.dir, "x"))
			return err
		})
		require.True(t, ok, "a stat on the failed ring's CPU still waits after 30 s")
		require.Error(t, err)
		// ECANCELED: a request the failed ring's teardown ended.
		require.True(t, errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ECANCELED), "stat: %v", err)
	}
	for i, m := range mounts {
		ended := make(chan struct{})
		go func() {
			m.us.Wait()
			m.server.Wait()
			close(ended)
		}()
		select {
		case <-ended:
		case <-time.After(60 * time.Second):
			t.Fatalf("mount %d: its servers did not end after the abort", i)
		}
	}
	require.True(t, set.failed.Load())

	m := mountLoopback(t)
	require.True(t, m.us.Active())
	require.NotSame(t, set, m.us.set, "a new mount got the failed rings")
	for cpu := range 2 {
		err, ok := onCPU(cpu, 30*time.Second, func() error {
			name := filepath.Join(m.dir, fmt.Sprintf("cpu%d", cpu))
			if err := os.WriteFile(name, []byte("y"), 0o644); err != nil {
				return err
			}
			_, err := os.ReadFile(name)
			return err
		})
		require.True(t, ok, "a request on CPU %d of the new mount waits", cpu)
		require.NoError(t, err)
	}
}

// TestRingFailsWhileMounting: a ring that fails while a mount waits to
// register on it fails that Mount (errRingFailed), which leaves nothing
// mounted, rather than leaving a connection whose requests the kernel
// holds for ever (its queue on that ring never registered, so it never
// turns to /dev/fuse); a mount made afterwards is served.
func TestRingFailsWhileMounting(t *testing.T) {
	skipWithoutURing(t)
	ncpu, err := possibleCPUs()
	require.NoError(t, err)
	if ncpu < 2 || ncpu > maxThreads {
		t.Skipf("%d CPUs: the test wants a ring a CPU, at least two", ncpu)
	}
	first := mountLoopback(t)
	useMount(t, first, "x")
	pool.mu.Lock()
	set := pool.cur
	pool.mu.Unlock()
	r := set.rings[0]
	held, hold := make(chan struct{}), make(chan struct{})
	r.post(func(m *ringMail) {
		m.onRing = append(m.onRing, func() {
			close(held)
			<-hold
		})
	})
	<-held // the ring thread waits in the test's function

	under, dir := t.TempDir(), t.TempDir()
	root, err := fs.NewLoopbackRoot(under)
	require.NoError(t, err)
	opts := &fs.Options{MountOptions: fuse.MountOptions{FsName: "uringtest", Name: "uringtest", MaxWrite: 1 << 20}}
	mounted := make(chan error, 1)
	go func() {
		server, us, err := Mount(dir, fs.NewNodeFS(root, opts), &opts.MountOptions, slog.Default())
		if err == nil {
			_ = us.Unmount()
			server.Wait()
			us.Wait()
		}
		mounted <- err
	}()
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.mail.adds) > 0
	}, 30*time.Second, time.Millisecond, "the mount's registration reaches the held ring")
	null, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	require.NoError(t, unix.Dup3(null, r.io.fd, unix.O_CLOEXEC)) // its next io_uring_enter fails
	require.NoError(t, unix.Close(null))
	close(hold)

	select {
	case err := <-mounted:
		require.ErrorIs(t, err, errRingFailed)
	case <-time.After(60 * time.Second):
		t.Fatal("Mount still waits 60 s after the ring failed")
	}
	mounts, err := os.ReadFile("/proc/self/mounts")
	require.NoError(t, err)
	require.NotContains(t, string(mounts), " "+dir+" ", "the failed mount is detached")

	m := mountLoopback(t)
	require.NotSame(t, set, m.us.set)
	useMount(t, m, "new")
}
