package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ackWriter writes numbered blocks through one descriptor until a write
// fails, counting the bytes the kernel acknowledged.
type ackWriter struct {
	name  string
	f     *os.File
	base  int64 // bytes in the file before the first block
	acked atomic.Int64
	err   error
	done  chan struct{}
}

const ackBlock = 4096

// ackBlockAt is block i of the writer named name.
func ackBlockAt(name string, i int64) []byte {
	line := fmt.Sprintf("%s block %08d ", name, i)
	return append(append([]byte(line), bytes.Repeat([]byte{'.'}, ackBlock-len(line)-1)...), '\n')
}

// ackContent is what the writer named name has written after n blocks.
func ackContent(name string, n int64) []byte {
	var b bytes.Buffer
	for i := range n {
		b.Write(ackBlockAt(name, i))
	}
	return b.Bytes()
}

func startAckWriter(name string, f *os.File, base int64) *ackWriter {
	w := &ackWriter{name: name, f: f, base: base, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		deadline := time.Now().Add(2 * time.Minute)
		for i := int64(0); time.Now().Before(deadline); i++ {
			n, err := f.Write(ackBlockAt(name, i))
			w.acked.Add(int64(n))
			if err != nil {
				w.err = err
				return
			}
			if i%4 == 3 {
				// At most about 16 MB/s: the passed-through writers would
				// write hundreds of MB for the final flush to store.
				time.Sleep(time.Millisecond)
			}
		}
		w.err = errors.New("no write failed in two minutes")
	}()
	return w
}

// homefsMountsUnder lists the homefs mounts in the mount table below dir.
func homefsMountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	ms, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(ms), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) > 4 && len(g) > 1 && strings.HasPrefix(f[4], dir) &&
			(g[0] == "fuse.homefs" || strings.HasPrefix(g[1], "homefs:")) {
			out = append(out, f[4])
		}
	}
	return out
}

// TestShutdownWithWritersLosesNothing: SIGTERM while three writers keep
// writing through a mount (an O_RDWR descriptor the daemon serves, an
// O_WRONLY|O_APPEND appender the kernel passes through, and a file
// created as `cmd > file` does, which is staged): the daemon detaches the
// busy mount, serves the open files for the grace period, ends the
// connection and flushes. Every writer then gets an error, the daemon
// exits 0, no mount is left behind, and after a restart every
// acknowledged byte is there. On both transports.
func TestShutdownWithWritersLosesNothing(t *testing.T) {
	for _, uring := range []string{"on", "off"} {
		t.Run("fuse-uring="+uring, func(t *testing.T) {
			testShutdownWithWriters(t, "--fuse-uring="+uring)
		})
	}
}

func testShutdownWithWriters(t *testing.T, transport string) {
	e := newEnv(t)
	e.start("--shutdown-grace", "1s", transport)
	mnt := e.mkdir("mnt")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)

	head := []byte("appended below\n")
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "append.log"), head, 0o644))
	time.Sleep(200 * time.Millisecond) // the kernel's release of that write
	rdwr, err := os.OpenFile(filepath.Join(mnt, "rdwr.bin"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	appender, err := os.OpenFile(filepath.Join(mnt, "append.log"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	// A shell's `cmd > file`.
	staged, err := os.OpenFile(filepath.Join(mnt, "staged.out"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	writers := []*ackWriter{
		startAckWriter("rdwr.bin", rdwr, 0),
		startAckWriter("append.log", appender, int64(len(head))),
		startAckWriter("staged.out", staged, 0),
	}
	t.Cleanup(func() {
		for _, w := range writers {
			w.f.Close()
		}
	})

	time.Sleep(500 * time.Millisecond)
	signaled := time.Now()
	require.NoError(t, e.proc.Process.Signal(syscall.SIGTERM))
	var exit error
	select {
	case exit = <-e.done:
		e.proc = nil
	case <-time.After(60 * time.Second):
		t.Fatalf("serve did not exit:\n%s", e.logs.String())
	}
	require.NoError(t, exit, "serve's exit status:\n%s", e.logs.String())
	exited := time.Since(signaled)
	for _, w := range writers {
		select {
		case <-w.done:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still writes after the daemon exited (%d bytes acknowledged)", w.name, w.acked.Load())
		}
		require.Error(t, w.err)
		require.NotContains(t, w.err.Error(), "two minutes", w.name)
		t.Logf("%s: %d bytes acknowledged, then %v", w.name, w.acked.Load(), w.err)
	}
	t.Logf("serve exited %v after SIGTERM", exited.Round(time.Millisecond))
	for _, l := range strings.Split(e.logs.String(), "\n") {
		if !strings.Contains(l, "level=DEBUG") && l != "" {
			t.Log(l)
		}
	}
	require.Empty(t, homefsMountsUnder(t, e.dir), "mounts left behind")

	e.start(transport)
	e.ok("mount", "s", mnt)
	for _, w := range writers {
		got, err := os.ReadFile(filepath.Join(mnt, w.name))
		require.NoError(t, err)
		acked := w.acked.Load()
		require.GreaterOrEqual(t, int64(len(got))-w.base, acked, "%s lost acknowledged bytes", w.name)
		want := ackContent(w.name, (acked+ackBlock-1)/ackBlock)[:acked]
		if w.base > 0 {
			require.Equal(t, head, got[:w.base])
		}
		require.True(t, bytes.Equal(want, got[w.base:w.base+acked]), "%s: acknowledged bytes differ", w.name)
		t.Logf("%s: %d bytes after the restart", w.name, int64(len(got))-w.base)
	}
}
