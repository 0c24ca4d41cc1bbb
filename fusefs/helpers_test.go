package fusefs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// helperEnv names the helper a re-executed test binary runs instead of
// the tests; helpers are separate processes because the kernel must see
// two processes (locks), or because touching our own mount from inside
// the daemon can deadlock it (mmap page faults).
const helperEnv = "HOMEFS_TEST_HELPER"

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(runHelper(mode, os.Args[1:]))
	}
	os.Exit(m.Run())
}

func runHelper(mode string, args []string) int {
	var err error
	switch mode {
	case "trylock":
		err = helperTrylock(args)
	case "mmap":
		err = helperMmap(args)
	case "mmap-at":
		err = helperMmapAt(args)
	case "mmap-fill":
		err = helperMmapFill(args)
	case "mmap-watch":
		err = helperMmapWatch(args)
	case "durable":
		err = helperDurable(args)
	case "jsonl-reader":
		err = helperJSONLReader(args)
	default:
		if _, ok := benchWorkloads[mode]; ok {
			err = runWorkload(mode, args)
		} else {
			err = fmt.Errorf("unknown helper %q", mode)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// helper returns a command running the test binary as helper mode.
func helper(ctx context.Context, mode string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	// A race build sleeps a second before it exits (atexit_sleep_ms),
	// which would cost every helper of the race run its second.
	race := "atexit_sleep_ms=0"
	var env []string
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, "GORACE="); ok {
			race = v + " " + race
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "GORACE="+race, helperEnv+"="+mode)
	cmd.Stderr = os.Stderr
	return cmd
}

// runHelperOutput runs a helper to completion and returns its stdout.
func runHelperOutput(t *testing.T, mode string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := helper(ctx, mode, args...).Output()
	require.NoError(t, err, "helper %s %v", mode, args)
	return strings.TrimSpace(string(out))
}

// helperTrylock: PATH START LEN tries a non-blocking fcntl write lock and
// prints "ok", or the errno and the pid F_GETLK reports as holder.
func helperTrylock(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("trylock PATH START LEN")
	}
	start, _ := strconv.ParseInt(args[1], 10, 64)
	length, _ := strconv.ParseInt(args[2], 10, 64)
	f, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: start, Len: length}
	probe := lk
	if err := unix.FcntlFlock(f.Fd(), unix.F_GETLK, &probe); err != nil {
		return err
	}
	err = unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk)
	switch {
	case err == nil:
		fmt.Println("ok")
	case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EACCES):
		fmt.Printf("busy %d\n", probe.Pid)
	default:
		return err
	}
	return nil
}

// helperMmap: PATH SIZE SEED maps the file shared and writable, fills it
// with seeded bytes, msyncs and unmaps.
func helperMmap(args []string) error {
	if len(args) != 3 {
		return fmt.Errorf("mmap PATH SIZE SEED")
	}
	size, _ := strconv.Atoi(args[1])
	seed, _ := strconv.ParseUint(args[2], 10, 64)
	f, err := os.OpenFile(args[0], os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	copy(mem, randBytes(seed, size))
	if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	return unix.Munmap(mem)
}

// helperMmapAt: PATH OFF LEN SEED [append] maps the whole file shared and
// writable, writes LEN seeded bytes at OFF through the mapping, msyncs and
// unmaps; with append, through a descriptor opened O_RDWR|O_APPEND. It
// prints "ok", "beyond" for a range past the end (which the mapping
// cannot reach), or the errno that stopped it.
func helperMmapAt(args []string) error {
	if len(args) != 4 && (len(args) != 5 || args[4] != "append") {
		return fmt.Errorf("mmap-at PATH OFF LEN SEED [append]")
	}
	off, _ := strconv.Atoi(args[1])
	n, _ := strconv.Atoi(args[2])
	seed, _ := strconv.ParseUint(args[3], 10, 64)
	flags := unix.O_RDWR | unix.O_CLOEXEC
	if len(args) == 5 {
		flags |= unix.O_APPEND
	}
	err := func() error {
		fd, err := unix.Open(args[0], flags, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if st.Size == 0 || int64(off+n) > st.Size {
			fmt.Println("beyond")
			return nil
		}
		mem, err := unix.Mmap(fd, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		copy(mem[off:], randBytes(seed, n))
		if err := unix.Msync(mem, unix.MS_SYNC); err != nil {
			return err
		}
		if err := unix.Munmap(mem); err != nil {
			return err
		}
		fmt.Println("ok")
		return nil
	}()
	var errno syscall.Errno
	if errors.As(err, &errno) {
		fmt.Println("errno", unix.ErrnoName(errno))
		return nil
	}
	return err
}

// randBytes returns n bytes from a fixed seed.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// newMount returns an engine over a memory store and a mount of session
// "s".
func newMount(t *testing.T) (*Engine, *Mount) {
	t.Helper()
	e := NewTestEngine(t, nil)
	return e, MountForTest(t, e, "s", "", MountOptions{})
}

func requireErrno(t *testing.T, err error, want syscall.Errno, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	var got syscall.Errno
	require.True(t, errors.As(err, &got), "error %v (%T) carries no errno", err, err)
	require.Equal(t, want, got, append([]any{"error %v"}, err)...)
}

func write(t *testing.T, path string, data string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func stat(t *testing.T, path string) *syscall.Stat_t {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Lstat(path, &st), "lstat %s", path)
	return &st
}

// capture captures session and mounts the snapshot read-only.
func captureMount(t *testing.T, e *Engine, session string) (id string, dir string) {
	t.Helper()
	ctx := context.Background()
	_, id, err := e.Capture(ctx, session, "test", nil)
	require.NoError(t, err)
	return id, mountSnapshot(t, e, id)
}

func mountSnapshot(t *testing.T, e *Engine, spec string) string {
	t.Helper()
	m, err := e.MountSnapshot(context.Background(), spec, "", t.TempDir(), MountOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Unmount() })
	return m.Dir()
}

// forkMount forks source into target and mounts target read-write.
func forkMount(t *testing.T, e *Engine, source, target string) *Mount {
	t.Helper()
	_, err := e.Fork(context.Background(), source, target)
	require.NoError(t, err)
	return MountForTest(t, e, target, "", MountOptions{})
}

// chunkRefs returns the chunk refs of the file at path in the stored tree
// under root.
func chunkRefs(t *testing.T, store cas.Store, root cas.Ref, path string) []cas.Ref {
	t.Helper()
	ctx := context.Background()
	var refs []cas.Ref
	found := false
	err := manifest.Walk(ctx, store, root, func(p string, e *manifest.Entry) error {
		if p != path {
			return nil
		}
		found = true
		cl, err := manifest.LoadChunkList(ctx, store, e)
		if err != nil {
			return err
		}
		for i := range cl.Len() {
			refs = append(refs, cl.At(i))
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, found, "%s not in tree %s", path, root.Short())
	return refs
}

// lines reads whole lines from r until it sees want, or fails after a
// timeout.
func waitLine(t *testing.T, r *bufio.Reader, want string) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		for {
			l, err := r.ReadString('\n')
			if err != nil {
				done <- fmt.Errorf("waiting for %q: %w (last %q)", want, err, l)
				return
			}
			if strings.TrimSpace(l) == want {
				done <- nil
				return
			}
		}
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(90 * time.Second):
		t.Fatalf("timeout waiting for %q", want)
	}
}

// isPrefix reports whether a is a byte prefix of b.
func isPrefix(a, b []byte) bool { return len(a) <= len(b) && bytes.Equal(a, b[:len(a)]) }

// dumpTree describes every entry below dir (type, mode, owner, size,
// content or link target), for comparing a live tree with a snapshot.
func dumpTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st := info.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%o %d:%d mtime=%d.%09d", st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
		if st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
			buf := make([]byte, 4096)
			k, err := unix.Listxattr(p, buf)
			if err != nil {
				return err
			}
			for _, x := range strings.Split(string(buf[:k]), "\x00") {
				if x != "" {
					v := make([]byte, 4096)
					vk, err := unix.Getxattr(p, x, v)
					if err != nil {
						return err
					}
					desc += fmt.Sprintf(" %s=%q", x, v[:vk])
				}
			}
		}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" nlink=%d %x", st.Nlink, cas.Sum(b).Short())
		case syscall.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		case syscall.S_IFDIR:
			desc += fmt.Sprintf(" nlink=%d", st.Nlink)
		}
		if rel != "." {
			out[rel] = desc
		}
		return nil
	})
	require.NoError(t, err)
	return out
}
