package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

func TestCaptureIsolation(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := m.Dir()
	write(t, filepath.Join(d, "a"), "v1")
	f, err := os.OpenFile(filepath.Join(d, "open"), os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteString("before")
	require.NoError(t, err)
	_, id, err := e.Capture(context.Background(), "s", "one", nil)
	require.NoError(t, err)

	write(t, filepath.Join(d, "a"), "v2")
	write(t, filepath.Join(d, "b"), "new")
	_, err = f.WriteString(" after")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(filepath.Join(d, "a"), 0o600))

	snap := mountSnapshot(t, e, id)
	require.Equal(t, "v1", read(t, filepath.Join(snap, "a")))
	require.Equal(t, "before", read(t, filepath.Join(snap, "open")))
	require.Equal(t, uint32(0o644), stat(t, filepath.Join(snap, "a")).Mode&0o777)
	_, err = os.Stat(filepath.Join(snap, "b"))
	requireErrno(t, err, syscall.ENOENT)
	// Even after a later capture and sync the first one is unchanged.
	_, _, err = e.Capture(context.Background(), "s", "two", nil)
	require.NoError(t, err)
	require.Equal(t, "v1", read(t, filepath.Join(mountSnapshot(t, e, id), "a")))
}

func TestForkIsolation(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	write(t, filepath.Join(m.Dir(), "shared/f"), "base")
	fm := forkMount(t, e, "s", "child")
	require.Equal(t, "base", read(t, filepath.Join(fm.Dir(), "shared/f")))

	write(t, filepath.Join(m.Dir(), "shared/f"), "parent")
	write(t, filepath.Join(fm.Dir(), "shared/g"), "child")
	require.NoError(t, os.Rename(filepath.Join(fm.Dir(), "shared"), filepath.Join(fm.Dir(), "moved")))

	require.Equal(t, "base", read(t, filepath.Join(fm.Dir(), "moved/f")))
	_, err := os.Stat(filepath.Join(m.Dir(), "shared/g"))
	requireErrno(t, err, syscall.ENOENT)
	require.Equal(t, "parent", read(t, filepath.Join(m.Dir(), "shared/f")))

	// And after both sides are flushed and captured.
	_, snapParent := captureMount(t, e, "s")
	_, snapChild := captureMount(t, e, "child")
	require.Equal(t, "parent", read(t, filepath.Join(snapParent, "shared/f")))
	require.Equal(t, "base", read(t, filepath.Join(snapChild, "moved/f")))
	require.Equal(t, "child", read(t, filepath.Join(snapChild, "moved/g")))
}

func TestRestore(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx := context.Background()
	d := m.Dir()
	write(t, filepath.Join(d, "dir/f"), "v1")
	write(t, filepath.Join(d, "top"), "t1")
	_, id1, err := e.Capture(ctx, "s", "one", nil)
	require.NoError(t, err)

	write(t, filepath.Join(d, "dir/f"), "v2-longer")
	write(t, filepath.Join(d, "added"), "x")
	// Names the restore brings back, looked up (and maybe cached as
	// absent) just before it.
	require.NoError(t, os.Rename(filepath.Join(d, "top"), filepath.Join(d, "top2")))
	require.NoError(t, os.Rename(filepath.Join(d, "dir/f"), filepath.Join(d, "dir/f2")))
	require.NoError(t, os.Rename(filepath.Join(d, "dir/f2"), filepath.Join(d, "dir/f")))
	_, err = os.Stat(filepath.Join(d, "top"))
	requireErrno(t, err, syscall.ENOENT)
	open, err := os.OpenFile(filepath.Join(d, "dir/f"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer open.Close()

	require.NoError(t, e.Restore(ctx, "s", id1))
	// The open descriptor keeps the content it had.
	buf := make([]byte, 9)
	_, err = open.ReadAt(buf, 0)
	require.NoError(t, err)
	require.Equal(t, "v2-longer", string(buf))
	_, err = open.WriteAt([]byte("W"), 0)
	require.NoError(t, err)
	// New opens see the restored tree.
	require.Equal(t, "v1", read(t, filepath.Join(d, "dir/f")))
	require.Equal(t, "t1", read(t, filepath.Join(d, "top")))
	_, err = os.Stat(filepath.Join(d, "added"))
	requireErrno(t, err, syscall.ENOENT)
	_, err = os.Stat(filepath.Join(d, "top2"))
	requireErrno(t, err, syscall.ENOENT)
	// Writes through the old descriptor do not reach the restored tree,
	// nor a capture of it.
	_, snap := captureMount(t, e, "s")
	require.Equal(t, "v1", read(t, filepath.Join(snap, "dir/f")))
	require.Equal(t, "v1", read(t, filepath.Join(d, "dir/f")))
	// The restored tree is writable.
	write(t, filepath.Join(d, "dir/f"), "v3")
	require.Equal(t, "v3", read(t, filepath.Join(d, "dir/f")))
}

// TestRestoreMissing: a restore to a snapshot whose chunks are missing
// fails and changes nothing.
func TestRestoreMissing(t *testing.T) {
	t.Parallel()
	store := cas.NewMemory()
	e := NewTestEngine(t, store)
	m := MountForTest(t, e, "s", "", MountOptions{})
	ctx := context.Background()
	d := m.Dir()
	write(t, filepath.Join(d, "f"), "only in the first snapshot")
	_, id1, err := e.Capture(ctx, "s", "one", nil)
	require.NoError(t, err)
	refs := chunkRefs(t, store, mustHead(t, e, "s").Root, "f")
	write(t, filepath.Join(d, "f"), "second")
	write(t, filepath.Join(d, "g"), "g")
	_, id2, err := e.Capture(ctx, "s", "two", nil)
	require.NoError(t, err)
	write(t, filepath.Join(d, "live"), "unflushed")
	require.NoError(t, store.Delete(ctx, refs...))

	err = e.Restore(ctx, "s", id1)
	require.Error(t, err)
	require.True(t, errors.Is(err, cas.ErrNotFound), "restore: %v", err)
	require.Equal(t, "second", read(t, filepath.Join(d, "f")))
	require.Equal(t, "unflushed", read(t, filepath.Join(d, "live")))
	require.Equal(t, id2, mustHead(t, e, "s").Snapshot, "head unchanged")
	_, snap := captureMount(t, e, "s")
	require.Equal(t, "unflushed", read(t, filepath.Join(snap, "live")))
}

// TestConcurrentCaptures: writers write file i and then set their counter
// to i+1 (temp file and rename) while captures are taken; in every
// snapshot each counter is at most the files present, which are whole.
func TestConcurrentCaptures(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx := context.Background()
	d := m.Dir()
	const writers = 4
	content := func(w, i int) []byte { return randBytes(uint64(w*1000+i), 1000+i*37) }
	stop := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		dir := filepath.Join(d, fmt.Sprintf("w%d", w))
		require.NoError(t, os.Mkdir(dir, 0o755))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%d", i)), content(w, i), 0o644); err != nil {
					errs <- err
					return
				}
				tmp := filepath.Join(dir, "counter.tmp")
				if err := os.WriteFile(tmp, []byte(strconv.Itoa(i+1)), 0o644); err != nil {
					errs <- err
					return
				}
				if err := os.Rename(tmp, filepath.Join(dir, "counter")); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var ids []string
	for range 6 {
		time.Sleep(40 * time.Millisecond)
		_, id, err := e.Capture(ctx, "s", "concurrent", nil)
		require.NoError(t, err)
		ids = append(ids, id)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, id := range ids {
		snap := mountSnapshot(t, e, id)
		for w := range writers {
			dir := filepath.Join(snap, fmt.Sprintf("w%d", w))
			c := 0
			if b, err := os.ReadFile(filepath.Join(dir, "counter")); err == nil {
				c, err = strconv.Atoi(string(b))
				require.NoError(t, err, "counter of w%d in %s: %q", w, id, b)
			} else {
				requireErrno(t, err, syscall.ENOENT)
			}
			for i := range c {
				got, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("file%d", i)))
				require.NoError(t, err, "snapshot %s: w%d counter %d but file%d", id, w, c, i)
				require.Equal(t, content(w, i), got, "snapshot %s: w%d file%d whole", id, w, i)
			}
		}
	}
}

func TestSubtreeMounts(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx := context.Background()
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "workspace"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "codex-home"), 0o700))
	ws := MountForTest(t, e, "s", "workspace", MountOptions{})
	ch := MountForTest(t, e, "s", "/codex-home/", MountOptions{})
	require.Equal(t, "codex-home", ch.Subtree())
	write(t, filepath.Join(ws.Dir(), "main.go"), "package main")
	write(t, filepath.Join(ch.Dir(), "sessions/rollout.jsonl"), "{}\n")
	require.Equal(t, "package main", read(t, filepath.Join(m.Dir(), "workspace/main.go")))
	_, err := e.Mount(ctx, "s", "workspace/main.go", t.TempDir(), MountOptions{})
	require.ErrorIs(t, err, ErrNotDirectory)
	_, err = e.Mount(ctx, "s", "workspace/main.go/below", t.TempDir(), MountOptions{})
	require.ErrorIs(t, err, ErrNotDirectory)

	_, snap := captureMount(t, e, "s")
	require.Equal(t, "package main", read(t, filepath.Join(snap, "workspace/main.go")))
	require.Equal(t, "{}\n", read(t, filepath.Join(snap, "codex-home/sessions/rollout.jsonl")))
	require.Equal(t, uint32(0o700), stat(t, filepath.Join(snap, "codex-home")).Mode&0o777)
}

// TestMountMakesMissingSubtree checks that a writable mount of a subtree
// that does not exist creates it (mode 0755, owned like the session root,
// seen at once by a mount that had looked it up), and that a read-only
// one refuses it with ErrNoSubtree and creates nothing.
func TestMountMakesMissingSubtree(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx := context.Background()
	require.NoError(t, os.Chown(m.Dir(), 1234, 5678))
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "codex-home"), 0o700))
	_, err := os.Lstat(filepath.Join(m.Dir(), "codex-home/tmp")) // cached as absent
	requireErrno(t, err, syscall.ENOENT)
	id, _ := captureMount(t, e, "s")

	// Read-only mounts create nothing.
	_, err = e.Mount(ctx, "s", "codex-home/tmp/arg0", t.TempDir(), MountOptions{ReadOnly: true})
	require.ErrorIs(t, err, ErrNoSubtree)
	_, err = e.MountSnapshot(ctx, "@"+id, "codex-home/tmp/arg0", t.TempDir(), MountOptions{})
	require.ErrorIs(t, err, ErrNoSubtree)
	_, err = os.Lstat(filepath.Join(m.Dir(), "codex-home/tmp"))
	requireErrno(t, err, syscall.ENOENT)

	sub := MountForTest(t, e, "s", "codex-home/tmp/arg0", MountOptions{})
	for _, p := range []string{"codex-home/tmp", "codex-home/tmp/arg0"} {
		st := stat(t, filepath.Join(m.Dir(), p))
		require.Equal(t, uint32(syscall.S_IFDIR|0o755), st.Mode, p)
		require.Equal(t, [2]uint32{1234, 5678}, [2]uint32{st.Uid, st.Gid}, p)
	}
	require.Equal(t, uint32(0o700), stat(t, filepath.Join(m.Dir(), "codex-home")).Mode&0o7777, "an existing directory is left as it is")
	write(t, filepath.Join(sub.Dir(), "f"), "x")
	require.Equal(t, "x", read(t, filepath.Join(m.Dir(), "codex-home/tmp/arg0/f")))
	require.NoError(t, sub.Unmount())
	again := MountForTest(t, e, "s", "codex-home/tmp/arg0", MountOptions{})
	require.Equal(t, "x", read(t, filepath.Join(again.Dir(), "f")), "a second mount finds what the first created")
	_, snap := captureMount(t, e, "s")
	require.Equal(t, "x", read(t, filepath.Join(snap, "codex-home/tmp/arg0/f")))
}

func TestReadOnlyMounts(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	write(t, filepath.Join(m.Dir(), "f"), "x")
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "d"), 0o755))
	id, snap := captureMount(t, e, "s")
	_ = id
	ro, err := e.Mount(context.Background(), "s", "", t.TempDir(), MountOptions{ReadOnly: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ro.Unmount() })
	for _, dir := range []string{snap, ro.Dir()} {
		require.Equal(t, "x", read(t, filepath.Join(dir, "f")))
		for name, err := range map[string]error{
			"write":    os.WriteFile(filepath.Join(dir, "f"), []byte("y"), 0o644),
			"create":   os.WriteFile(filepath.Join(dir, "new"), []byte("y"), 0o644),
			"mkdir":    os.Mkdir(filepath.Join(dir, "d2"), 0o755),
			"unlink":   os.Remove(filepath.Join(dir, "f")),
			"rmdir":    os.Remove(filepath.Join(dir, "d")),
			"rename":   os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")),
			"chmod":    os.Chmod(filepath.Join(dir, "f"), 0o600),
			"symlink":  os.Symlink("x", filepath.Join(dir, "l")),
			"setxattr": unix.Setxattr(filepath.Join(dir, "f"), "user.x", []byte("1"), 0),
			"truncate": os.Truncate(filepath.Join(dir, "f"), 0),
		} {
			requireErrno(t, err, syscall.EROFS, name)
		}
		require.Equal(t, "x", read(t, filepath.Join(dir, "f")))
	}
}

// TestRandomOpsCapture applies a seeded random mix of namespace and
// content operations and checks after each batch that a capture (and a
// fork of it) holds exactly the live tree.
func TestRandomOpsCapture(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := m.Dir()
	r := rand.New(rand.NewPCG(99, 99))
	var dirs = []string{"."}
	var files []string
	pick := func(l []string) string { return l[r.IntN(len(l))] }
	name := func() string { return fmt.Sprintf("n%d", r.IntN(40)) }
	for step := range 600 {
		switch op := r.IntN(12); {
		case op == 0:
			p := filepath.Join(pick(dirs), name())
			if os.Mkdir(filepath.Join(d, p), 0o755) == nil {
				dirs = append(dirs, p)
			}
		case op <= 3:
			p := filepath.Join(pick(dirs), name())
			if os.WriteFile(filepath.Join(d, p), randBytes(uint64(step), r.IntN(3*manifest.ChunkSize)), 0o644) == nil {
				files = append(files, p)
			}
		case op == 4 && len(files) > 0:
			p := pick(files)
			if f, err := os.OpenFile(filepath.Join(d, p), os.O_WRONLY, 0); err == nil {
				_, _ = f.WriteAt(randBytes(uint64(step), 1000), int64(r.IntN(2*manifest.ChunkSize)))
				f.Close()
			}
		case op == 5 && len(files) > 0:
			_ = os.Truncate(filepath.Join(d, pick(files)), int64(r.IntN(2*manifest.ChunkSize)))
		case op == 6 && len(files) > 0:
			p := filepath.Join(pick(dirs), name())
			if os.Link(filepath.Join(d, pick(files)), filepath.Join(d, p)) == nil {
				files = append(files, p)
			}
		case op == 7 && len(files) > 0:
			_ = os.Remove(filepath.Join(d, pick(files)))
		case op == 8:
			from := pick(append(files, dirs[1:]...))
			to := filepath.Join(pick(dirs), name())
			if os.Rename(filepath.Join(d, from), filepath.Join(d, to)) == nil {
				files, dirs = append(files, to), append(dirs, to)
			}
		case op == 9:
			_ = os.Symlink(pick(append(files, "dangling")), filepath.Join(d, pick(dirs), name()))
		case op == 10 && len(files) > 0:
			_ = unix.Chmod(filepath.Join(d, pick(files)), uint32(0o600+r.IntN(0o100)))
		case op == 11 && len(files) > 0:
			_ = unix.Setxattr(filepath.Join(d, pick(files)), "user."+name(), []byte(name()), 0)
		}
		if step%100 == 99 {
			live := dumpTree(t, d)
			id, snap := captureMount(t, e, "s")
			require.Equal(t, live, dumpTree(t, snap), "step %d", step)
			fm := forkMount(t, e, id, fmt.Sprintf("rand-%d", step))
			require.Equal(t, live, dumpTree(t, fm.Dir()), "fork at step %d", step)
		}
	}
}

// TestStress runs writers, readers, renamers, listers, syncs, captures
// and garbage collections on one session at once, for the race detector and for errors
// other than the expected ENOENT of names that moved.
func TestStress(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx := context.Background()
	d := m.Dir()
	require.NoError(t, os.Mkdir(filepath.Join(d, "dir"), 0o755))
	big := randBytes(51, 6<<20)
	require.NoError(t, os.WriteFile(filepath.Join(d, "big"), big, 0o644))
	stop := make(chan struct{})
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	run := func(name string, fn func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := fn(i); err != nil && !errors.Is(err, syscall.ENOENT) {
					errs <- fmt.Errorf("%s: %w", name, err)
					return
				}
			}
		}()
	}
	run("writer", func(i int) error {
		f, err := os.OpenFile(filepath.Join(d, "big"), os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		// Rewrite the same bytes at scattered offsets: content stays big.
		off := (i * 777_777) % (len(big) - 300_000)
		_, err = f.WriteAt(big[off:off+300_000], int64(off))
		return err
	})
	run("reader", func(i int) error {
		got, err := os.ReadFile(filepath.Join(d, "big"))
		if err == nil && !bytes.Equal(got, big) {
			return fmt.Errorf("read %d bytes that differ from what was written", len(got))
		}
		return err
	})
	run("renamer", func(i int) error {
		p := filepath.Join(d, "dir", fmt.Sprintf("f%d", i%20))
		if err := os.WriteFile(p, []byte(p), 0o644); err != nil {
			return err
		}
		return os.Rename(p, filepath.Join(d, "dir", fmt.Sprintf("g%d", i%7)))
	})
	run("lister", func(i int) error {
		_, err := os.ReadDir(filepath.Join(d, "dir"))
		return err
	})
	run("sync", func(i int) error {
		time.Sleep(20 * time.Millisecond)
		switch i % 3 {
		case 0:
			return e.Sync(ctx, "s")
		case 1:
			_, _, err := e.Capture(ctx, "s", "stress", nil)
			return err
		default:
			_, err := e.GC(ctx, nil)
			return err
		}
	})
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	live := dumpTree(t, d)
	_, snap := captureMount(t, e, "s")
	require.Equal(t, live, dumpTree(t, snap))
}

// TestRootAttributes checks that a session root's own attributes (mode,
// owner, xattrs, times) are kept like any directory's: by a capture, a
// fork, a remount and a restore. No entry holds them; the root's tree does
// (manifest.Tree.Self).
func TestRootAttributes(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx := context.Background()
	root := func(dir string) string {
		st := stat(t, dir)
		x := make([]byte, 64)
		n, err := unix.Getxattr(dir, "user.owner", x)
		if err != nil {
			n = 0
		}
		return fmt.Sprintf("%o %d:%d mtime=%d %q", st.Mode, st.Uid, st.Gid, st.Mtim.Sec, x[:n])
	}
	before, _ := captureMount(t, e, "s") // the defaults: 0755 root:root
	require.NoError(t, unix.Chmod(m.Dir(), 0o2770))
	require.NoError(t, os.Chown(m.Dir(), 1000, 100))
	require.NoError(t, unix.Setxattr(m.Dir(), "user.owner", []byte("agent"), 0))
	require.NoError(t, unix.UtimesNano(m.Dir(), []unix.Timespec{{Sec: 1e9}, {Sec: 1e9}}))
	want := root(m.Dir())
	require.Equal(t, `42770 1000:100 mtime=1000000000 "agent"`, want)

	_, snap := captureMount(t, e, "s")
	require.Equal(t, want, root(snap), "snapshot")
	fm := forkMount(t, e, "s", "root-fork")
	require.Equal(t, want, root(fm.Dir()), "fork")
	require.NoError(t, m.Unmount())
	m = MountForTest(t, e, "s", "", MountOptions{})
	require.Equal(t, want, root(m.Dir()), "remount")

	// A restore brings the root's attributes back too.
	require.NoError(t, e.Restore(ctx, "s", before))
	st := stat(t, m.Dir())
	require.Equal(t, uint32(syscall.S_IFDIR|0o755), st.Mode, "restored mode")
	require.Equal(t, uint32(0), st.Uid)
}
