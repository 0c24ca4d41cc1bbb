package fusefs

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"homefs/cas"
	"homefs/internal/catalog"
	"homefs/manifest"
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
// "d", writes durableFiles with fsync (and a directory fsync), prints
// "synced", writes an unsynced file and prints "unsynced", then keeps
// writing and flushing until it is killed.
func helperDurable(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("durable STOREDIR MOUNTPOINT")
	}
	ctx := context.Background()
	store, err := cas.OpenBadger(args[0], cas.BadgerOptions{})
	if err != nil {
		return err
	}
	cat := catalog.New(store)
	e := New(store, cat, Options{StoreDir: args[0]})
	if _, err := cat.CreateSession(ctx, "d", ""); err != nil {
		return err
	}
	m, err := e.Mount(ctx, "d", "", args[1], MountOptions{})
	if err != nil {
		return err
	}
	d := m.Dir()
	writeSync := func(name string, data []byte) error {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(d, name)), 0o755); err != nil {
			return err
		}
		f, err := os.Create(filepath.Join(d, name))
		if err != nil {
			return err
		}
		if _, err := f.Write(data); err != nil {
			return err
		}
		if err := f.Sync(); err != nil {
			return err
		}
		return f.Close()
	}
	syncDir := func(dir string) error {
		f, err := os.Open(dir)
		if err != nil {
			return err
		}
		defer f.Close()
		return f.Sync()
	}
	if err := os.WriteFile(filepath.Join(d, "config.json"), []byte("old"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(d, "removed"), []byte("x"), 0o644); err != nil {
		return err
	}
	for name, data := range durableFiles() {
		if name == "config.json" {
			continue
		}
		if err := writeSync(name, data); err != nil {
			return err
		}
	}
	// The durable replace: temp file, fsync, rename, fsync the directory.
	if err := writeSync("config.json.tmp", durableFiles()["config.json"]); err != nil {
		return err
	}
	if err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, "config.json.tmp"), unix.AT_FDCWD, filepath.Join(d, "config.json"), 0); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(d, "removed")); err != nil {
		return err
	}
	if err := syncDir(d); err != nil {
		return err
	}
	fmt.Println("synced")
	if err := os.WriteFile(filepath.Join(d, "unsynced"), []byte("maybe"), 0o644); err != nil {
		return err
	}
	fmt.Println("unsynced")
	for i := 0; ; i++ {
		if err := os.WriteFile(filepath.Join(d, "churn"), randBytes(uint64(i), 1<<20), 0o644); err != nil {
			return err
		}
		if i%3 == 0 {
			if err := e.Sync(ctx, "d"); err != nil {
				return err
			}
		}
		if i == 2 {
			fmt.Println("churning")
		}
	}
}

func TestDurability(t *testing.T) {
	t.Parallel()
	storeDir, mnt := t.TempDir(), t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := helper(ctx, "durable", storeDir, mnt)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		_ = unix.Unmount(mnt, unix.MNT_DETACH)
	})
	r := bufio.NewReader(out)
	waitLine(t, r, "synced")
	waitLine(t, r, "unsynced")
	waitLine(t, r, "churning")
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	killed = true
	require.NoError(t, unix.Unmount(mnt, unix.MNT_DETACH))

	store, err := cas.OpenBadger(storeDir, cas.BadgerOptions{})
	require.NoError(t, err, "the store opens cleanly after a kill -9")
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	e := NewTestEngine(t, store)
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
	// Data not fsynced may be missing, but what is there is whole.
	if got, err := os.ReadFile(filepath.Join(m.Dir(), "unsynced")); err == nil {
		require.Equal(t, "maybe", string(got))
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
				b, err := cas.OpenBadger(t.TempDir(), cas.BadgerOptions{})
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
