package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/testkit/cputest"
	"github.com/homefs/homefs/manifest"
)

// remoteOp is an operation on a file of a writable session whose chunks
// only a remote has, and which has to wait for one: run does it on the
// file at path, and want is the file's content after it, from the
// content before.
type remoteOp struct {
	name string
	run  func(path string) error
	want func(before []byte) []byte
}

// midChunk is an offset in the middle of the file's second stored chunk,
// and patch what the writes of remoteOps write there: more than an
// overlay takes (overlayMaxBytes), less than a chunk, so that it reads
// the stored chunk it lands in. Both are whole pages: the kernel sends a
// write of a page it does not cache in part in a request of its own,
// with the page locked until the reply (so a READDIRPLUS that saw the
// file change would wait for that page, whatever the daemon does).
const midChunk = manifest.ChunkSize + 4096

var patch = bytes.Repeat([]byte("patch..."), 7*4096/8)

var remoteOps = []remoteOp{
	{
		// A write-only appender passes through to a backing file, a copy
		// of the content (routeAppender).
		name: "open-append",
		run: func(path string) error {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			if _, err := f.Write([]byte("appended")); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
		want: func(before []byte) []byte { return append(slices.Clone(before), "appended"...) },
	},
	{
		name: "pwrite",
		run: func(path string) error {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			if _, err := f.WriteAt(patch, midChunk); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		},
		want: func(before []byte) []byte {
			b := slices.Clone(before)
			copy(b[midChunk:], patch)
			return b
		},
	},
	{
		// A small write starts an overlay, which reads nothing; an fsync
		// of a directory flushes the session, which merges it into the
		// stored chunk. (Not the file's directory: the kernel holds a
		// directory's lock through its fsync, which would hold up the
		// listing.)
		name: "fsync",
		run: func(path string) error {
			if err := os.Mkdir(path+".d", 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("small"), midChunk); err != nil {
				return err
			}
			d, err := os.Open(path + ".d")
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Sync()
		},
		want: func(before []byte) []byte {
			b := slices.Clone(before)
			copy(b[midChunk:], "small")
			return b
		},
	},
	{
		// A truncate into a stored chunk keeps that chunk's head.
		name: "truncate",
		run:  func(path string) error { return os.Truncate(path, midChunk+100) },
		want: func(before []byte) []byte { return slices.Clone(before[:midChunk+100]) },
	},
	{
		// A hole punched into part of a stored chunk keeps the rest.
		name: "punch-hole",
		run: func(path string) error {
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, midChunk, 4096)
		},
		want: func(before []byte) []byte {
			b := slices.Clone(before)
			clear(b[midChunk : midChunk+4096])
			return b
		},
	},
}

// TestRemoteWriteHoldsNothingElse: in a writable session whose files'
// chunks only a remote has (a lazy pull, then a fork), while an operation
// that needs one of them waits for it (remoteOps), stat of that file, ls
// -l of its directory and reads of local files, from every CPU (so on
// every FUSE ring over io_uring), complete; once the remote answers, the
// operation ends and the file holds what it wrote.
func TestRemoteWriteHoldsNothingElse(t *testing.T) {
	cpus := cputest.Usable(t)
	file := func(op, c int) string { return fmt.Sprintf("remote-%d-%d.bin", op, c) }
	content := func(op, c int) []byte { return randBytes(uint64(100*op+c), remoteSize) }
	local := func(op, c, x int) string { return fmt.Sprintf("local-%d-%d-%d.txt", op, c, x) }
	var files []string
	var remote [][]byte
	for op := range remoteOps {
		for _, c := range cpus {
			files = append(files, file(op, c))
			remote = append(remote, content(op, c))
			for _, x := range cpus {
				files = append(files, local(op, c, x))
				remote = append(remote, nil)
			}
		}
	}
	store, m := mountRemote(t, files, remote)
	for op, rop := range remoteOps {
		t.Run(rop.name, func(t *testing.T) {
			for _, c := range cpus {
				path := filepath.Join(m.Dir(), file(op, c))
				before := content(op, c)
				done := cputest.On(c, func() error { return rop.run(path) })
				waitRemote(t, store, chunksOf(before), done, rop.name)
				for _, x := range cpus {
					requireLocalOps(t, cputest.On(x, func() error { return localOps(m.Dir(), file(op, c), local(op, c, x)) }), x, rop.name, c)
				}
				select {
				case err := <-done:
					t.Fatalf("%s ended (%v) before the remote answered", rop.name, err)
				default:
				}
				for _, ref := range chunksOf(before) {
					store.release(ref)
				}
				require.NoError(t, <-done, rop.name)
				got, err := os.ReadFile(path)
				require.NoError(t, err)
				require.True(t, bytes.Equal(rop.want(before), got), "%s on CPU %d: the file's content after it", rop.name, c)
			}
		})
	}
}

// requireLocalOps waits for the local operations run on CPU x to end
// while op on CPU c waits for the remote.
func requireLocalOps(t *testing.T, ops <-chan error, x int, op string, c int) {
	t.Helper()
	select {
	case err := <-ops:
		require.NoError(t, err, "CPU %d", x)
	case <-time.After(stuckLimit):
		t.Fatalf("stat, ls or a local read on CPU %d stuck while %s on CPU %d waits for the remote", x, op, c)
	}
}

// mountRemote makes a writable session with files (a name's content
// nil: the name itself), stores it, and mounts it in a fresh engine,
// with the chunks of every file whose content is given on the "remote"
// alone (remoteStore).
func mountRemote(t *testing.T, names []string, contents [][]byte) (*remoteStore, *Mount) {
	ctx := context.Background()
	store := newRemoteStore()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e1 := New(store, catalog.New(store), Options{StoreDir: t.TempDir(), Logger: log})
	_, err := e1.Catalog().CreateSession(ctx, "s", "")
	require.NoError(t, err)
	m1, err := e1.Mount(ctx, "s", "", t.TempDir(), MountOptions{})
	require.NoError(t, err)
	for k, name := range names {
		b := contents[k]
		if b == nil {
			b = []byte(name)
		}
		require.NoError(t, os.WriteFile(filepath.Join(m1.Dir(), name), b, 0o644))
	}
	require.NoError(t, e1.Close(ctx))
	for _, b := range contents {
		for _, ref := range chunksOf(b) {
			store.makeRemote(ref)
		}
	}
	e := NewTestEngine(t, store)
	m := MountForTest(t, e, "s", "", MountOptions{})
	t.Cleanup(store.releaseAll) // before the unmount: a stuck operation holds it
	t.Logf("transport: %s", m.Transport())
	return store, m
}

// waitRemote waits until the "remote" is asked for one of refs, failing
// the test if the operation whose result done carries ends first.
func waitRemote(t *testing.T, store *remoteStore, refs []cas.Ref, done <-chan error, what string) {
	t.Helper()
	for {
		select {
		case ref := <-store.waiting:
			if slices.Contains(refs, ref) {
				return
			}
		case err := <-done:
			t.Fatalf("%s ended (%v) without waiting for the remote", what, err)
		case <-time.After(stuckLimit):
			t.Fatalf("%s never asked the remote", what)
		}
	}
}
