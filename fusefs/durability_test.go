package fusefs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// durableFiles is what the durability helper writes and fsyncs.
func durableFiles() map[string][]byte {
	return map[string][]byte{
		"small":              []byte("small file\n"),
		"big":                randBytes(21, 6<<20+777), // past the spill threshold
		"dir/nested":         []byte("nested\n"),
		"config.json":        []byte(`{"replaced":true}`),
		"codex/history.json": randBytes(22, 100<<10),
	}
}

// helperDurable: STOREDIR MOUNTPOINT opens a Badger store, mounts session
// "d", prints "mounted" and serves until it is killed. The test writes
// through the mount from its own process: a daemon must never use its own
// mount (a kill -9 would then hang on the request it can no longer answer).
func helperDurable(args []string) error {
	if len(args) != 2 && len(args) != 3 {
		return fmt.Errorf("durable STOREDIR MOUNTPOINT [FLUSH-INTERVAL]")
	}
	interval := time.Duration(-1)
	if len(args) == 3 {
		var err error
		if interval, err = time.ParseDuration(args[2]); err != nil {
			return err
		}
	}
	ctx := context.Background()
	store, err := badgerstore.Open(args[0], badgerstore.Options{})
	if err != nil {
		return err
	}
	cat := catalog.New(store)
	e := New(store, cat, Options{StoreDir: args[0], FlushInterval: interval})
	// Dies at the first flush that moves the head once a test made the
	// marker file (TestKillBetweenCommitAndReset).
	marker := filepath.Join(args[0], dieAfterCommit)
	e.afterCommit = func() {
		if _, err := os.Stat(marker); err == nil {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Hour)
		}
	}
	if _, err := cat.CreateSession(ctx, "d", ""); err != nil && !errors.Is(err, catalog.ErrExists) {
		return err // a restart (durableDaemon.restart) finds it
	}
	if _, err := e.Mount(ctx, "d", "", args[1], MountOptions{}); err != nil {
		return err
	}
	fmt.Println("mounted")
	time.Sleep(time.Hour)
	return nil
}

// durableDaemon is a child process serving session "d" of a Badger store
// in storeDir at mnt (helper mode "durable"), for tests that kill it.
type durableDaemon struct {
	cmd           *exec.Cmd
	exited        chan struct{}
	storeDir, mnt string
}

// startDurable starts a durableDaemon and waits until it has mounted; it
// is killed and its mount detached when the test ends. An argument sets
// its flush interval (none: no periodic flush).
func startDurable(t *testing.T, args ...string) *durableDaemon {
	t.Helper()
	d := &durableDaemon{storeDir: t.TempDir(), mnt: t.TempDir(), exited: make(chan struct{})}
	t.Cleanup(func() { unsealBackings(t, d.storeDir) })
	d.start(t, args...)
	return d
}

// restart starts a new daemon over the store and at the mountpoint of d,
// which was killed: it replays the journal d left.
func (d *durableDaemon) restart(t *testing.T, args ...string) *durableDaemon {
	t.Helper()
	n := &durableDaemon{storeDir: d.storeDir, mnt: d.mnt, exited: make(chan struct{})}
	n.start(t, args...)
	return n
}

func (d *durableDaemon) start(t *testing.T, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	d.cmd = helper(ctx, "durable", append([]string{d.storeDir, d.mnt}, args...)...)
	out, err := d.cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, d.cmd.Start())
	go func() { _ = d.cmd.Wait(); close(d.exited) }()
	t.Cleanup(func() {
		_ = d.cmd.Process.Kill()
		<-d.exited
		_ = unix.Unmount(d.mnt, unix.MNT_DETACH)
	})
	waitLine(t, bufio.NewReader(out), "mounted")
}

// kill kills the daemon with SIGKILL and detaches its mount.
func (d *durableDaemon) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGKILL))
	<-d.exited
	require.NoError(t, unix.Unmount(d.mnt, unix.MNT_DETACH))
}

// remount opens the killed daemon's store in this process, as a new
// daemon would (replaying the journal), and mounts its session.
func (d *durableDaemon) remount(t *testing.T) *Mount {
	t.Helper()
	store, err := badgerstore.Open(d.storeDir, badgerstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	e := New(store, catalog.New(store), Options{StoreDir: d.storeDir, FlushInterval: -1})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	return MountForTest(t, e, "d", "", MountOptions{})
}

// unsealBackings clears the immutable flag of the backing files a
// restarted daemon sealed (sealBackingDir) under storeDir, so that the
// test's temporary directory can be removed.
func unsealBackings(t *testing.T, storeDir string) {
	t.Helper()
	paths, _ := filepath.Glob(filepath.Join(storeDir, "backing", "*", sealedPrefix+"*"))
	for _, p := range paths {
		if f, err := os.Open(p); err == nil {
			_ = setImmutable(f, false)
			f.Close()
		}
	}
}

func writeSync(d, name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(filepath.Join(d, name)), 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(d, name))
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Sync()
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// TestDurability kills the daemon (kill -9) after fsync and checks that a
// new daemon over the same store shows every byte fsynced, and that
// what was not fsynced is whole or absent.
func TestDurability(t *testing.T) {
	t.Parallel()
	storeDir, mnt := t.TempDir(), t.TempDir()
	t.Cleanup(func() { unsealBackings(t, storeDir) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := helper(ctx, "durable", storeDir, mnt)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	var conn uint32 // the FUSE connection, to abort it if the kill hangs
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			if conn != 0 {
				_ = os.WriteFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", conn), []byte("1"), 0o200)
			}
			<-exited
		}
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	})
	waitLine(t, bufio.NewReader(out), "mounted")
	var st unix.Stat_t
	require.NoError(t, unix.Stat(mnt, &st))
	conn = unix.Minor(st.Dev)

	require.NoError(t, os.WriteFile(filepath.Join(mnt, "config.json"), []byte("old"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "removed"), []byte("x"), 0o644))
	for name, data := range durableFiles() {
		if name != "config.json" {
			require.NoError(t, writeSync(mnt, name, data))
		}
	}
	// The durable replace: temp file, fsync, rename, fsync the directory.
	require.NoError(t, writeSync(mnt, "config.json.tmp", durableFiles()["config.json"]))
	require.NoError(t, os.Rename(filepath.Join(mnt, "config.json.tmp"), filepath.Join(mnt, "config.json")))
	require.NoError(t, os.Remove(filepath.Join(mnt, "removed")))
	require.NoError(t, syncDir(mnt))
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "unsynced"), []byte("maybe"), 0o644))

	// Keep writing and syncing while the daemon dies.
	churning := make(chan struct{})
	churned := make(chan struct{})
	go func() {
		defer close(churned)
		for i := 0; ; i++ {
			if writeSync(mnt, "churn", randBytes(uint64(i), 1<<20)) != nil {
				return
			}
			if i == 2 {
				close(churning)
			}
		}
	}()
	<-churning
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("the daemon did not die")
	}
	<-churned
	require.NoError(t, unix.Unmount(mnt, unix.MNT_DETACH))

	store, err := badgerstore.Open(storeDir, badgerstore.Options{})
	require.NoError(t, err, "the store opens cleanly after a kill -9")
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	// The store directory holds the journal, which fsyncs went to.
	e := New(store, catalog.New(store), Options{StoreDir: storeDir, FlushInterval: -1})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	m := MountForTest(t, e, "d", "", MountOptions{})
	for name, want := range durableFiles() {
		got, err := os.ReadFile(filepath.Join(m.Dir(), name))
		require.NoError(t, err, name)
		require.True(t, bytes.Equal(want, got), "%s: %d bytes, want %d", name, len(got), len(want))
	}
	for _, gone := range []string{"removed", "config.json.tmp"} {
		_, err := os.Stat(filepath.Join(m.Dir(), gone))
		requireErrno(t, err, syscall.ENOENT, gone)
	}
	// Data not fsynced may be missing, but what is there is whole. (Its
	// create is journaled; its bytes went to a staging file the daemon
	// never saw before it died.)
	if got, err := os.ReadFile(filepath.Join(m.Dir(), "unsynced")); err == nil {
		require.Contains(t, []string{"", "maybe"}, string(got))
	} else {
		requireErrno(t, err, syscall.ENOENT)
	}
	if got, err := os.ReadFile(filepath.Join(m.Dir(), "churn")); err == nil {
		require.True(t, len(got) == 0 || len(got) == 1<<20, "churn: %d bytes", len(got))
	}
	require.NoError(t, catalog.VerifyComplete(context.Background(), store, mustHead(t, e, "d").Root))
}

func mustHead(t *testing.T, e *Engine, session string) *catalog.Head {
	t.Helper()
	h, err := e.Catalog().Head(context.Background(), session)
	require.NoError(t, err)
	return h
}

// TestCorruptChunk damages stored chunks and tree nodes: reading them
// gives EIO, never wrong bytes, and the intact parts stay readable.
func TestCorruptChunk(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"memory", "badger"} {
		t.Run(kind, func(t *testing.T) {
			var store cas.Store = cas.NewMemory()
			if kind == "badger" {
				b, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
				require.NoError(t, err)
				t.Cleanup(func() { _ = b.Close() })
				store = b
			}
			ctx := context.Background()
			e := NewTestEngine(t, store)
			m := MountForTest(t, e, "s", "", MountOptions{})
			data := randBytes(31, 3*manifest.ChunkSize+100)
			require.NoError(t, os.WriteFile(filepath.Join(m.Dir(), "f"), data, 0o644))
			write(t, filepath.Join(m.Dir(), "tree/x"), "x")
			_, id, err := e.Capture(ctx, "s", "before corruption", nil)
			require.NoError(t, err)
			root := mustHead(t, e, "s").Root
			refs := chunkRefs(t, store, root, "f")
			require.Len(t, refs, 4)
			var treeRef cas.Ref
			require.NoError(t, manifest.Walk(ctx, store, root, func(p string, en *manifest.Entry) error {
				if p == "tree" {
					treeRef = en.Tree
				}
				return nil
			}))
			c := store.(cas.Corrupter)
			require.NoError(t, c.CorruptForTest(refs[1]))
			require.NoError(t, c.CorruptForTest(treeRef))

			// A fresh mount of the snapshot: no kernel or chunk cache holds
			// the bytes.
			snap := mountSnapshot(t, e, id)
			_, err = os.ReadFile(filepath.Join(snap, "f"))
			requireErrno(t, err, syscall.EIO)
			f, err := os.Open(filepath.Join(snap, "f"))
			require.NoError(t, err)
			defer f.Close()
			buf := make([]byte, manifest.ChunkSize)
			_, err = f.ReadAt(buf, 0)
			require.NoError(t, err)
			require.True(t, bytes.Equal(data[:manifest.ChunkSize], buf), "chunk 0 intact")
			_, err = f.ReadAt(buf, manifest.ChunkSize)
			requireErrno(t, err, syscall.EIO)
			_, err = f.ReadAt(buf, manifest.ChunkSize+4096)
			requireErrno(t, err, syscall.EIO, "still EIO on a second try")
			_, err = f.ReadAt(buf, 2*manifest.ChunkSize)
			require.NoError(t, err)
			require.True(t, bytes.Equal(data[2*manifest.ChunkSize:3*manifest.ChunkSize], buf), "chunk 2 intact")
			_, err = os.ReadDir(filepath.Join(snap, "tree"))
			requireErrno(t, err, syscall.EIO)
			_, err = os.Stat(filepath.Join(snap, "tree/x"))
			requireErrno(t, err, syscall.EIO)

			// A fork of the damaged snapshot fails the same way, and so
			// does a restore to it (verified before it changes anything).
			fm := forkMount(t, e, id, "s2")
			_, err = os.ReadFile(filepath.Join(fm.Dir(), "f"))
			requireErrno(t, err, syscall.EIO)
			err = e.Restore(ctx, "s", id)
			require.Error(t, err)
			require.True(t, errors.Is(err, cas.ErrCorrupt) || errors.Is(err, cas.ErrNotFound), "restore: %v", err)
		})
	}
}
