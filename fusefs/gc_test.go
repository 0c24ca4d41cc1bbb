package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// newGCEngine returns an Engine whose catalog shares its Recorder, as the
// daemon builds it.
func newGCEngine(t *testing.T) (*Engine, *Recorder) {
	t.Helper()
	rec := Record(cas.NewMemory())
	e := New(rec, catalog.New(rec), Options{
		StoreDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	return e, rec
}

// readAll reads every file of the tree at root through the store, so that
// every chunk is fetched and verified.
func readAll(ctx context.Context, g cas.Getter, root cas.Ref) (map[string][]byte, error) {
	files := make(map[string][]byte)
	err := manifest.Walk(ctx, g, root, func(p string, e *manifest.Entry) error {
		if e.Kind != manifest.KindFile {
			return nil
		}
		cl, err := manifest.LoadChunkList(ctx, g, e)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		var buf bytes.Buffer
		for i := 0; i < cl.Len(); i++ {
			ref := cl.At(i)
			n := min(int64(manifest.ChunkSize), e.Size-int64(i)*manifest.ChunkSize)
			if ref.IsZero() {
				buf.Write(make([]byte, n))
				continue
			}
			b, err := g.Get(ctx, ref)
			if err != nil {
				return fmt.Errorf("%s chunk %d: %w", p, i, err)
			}
			buf.Write(b)
		}
		files[p] = buf.Bytes()
		return nil
	})
	return files, err
}

func TestGCUnreachableFreed(t *testing.T) {
	ctx := context.Background()
	e, rec := newGCEngine(t)
	m := MountForTest(t, e, "s", "", MountOptions{})
	require.NoError(t, os.WriteFile(filepath.Join(m.Dir(), "keep"), []byte("kept"), 0o644))
	garbage, err := rec.Unwrap().Put(ctx, []byte("nobody refers to me"))
	require.NoError(t, err)

	res, err := e.GC(ctx, nil)
	require.NoError(t, err)
	// The garbage, and the empty tree the session started with.
	require.EqualValues(t, 2, res.Freed)
	has, err := rec.HasMany(ctx, []cas.Ref{garbage})
	require.NoError(t, err)
	require.False(t, has[0])

	// The file written through the mount (only in memory before gc) is intact.
	b, err := os.ReadFile(filepath.Join(m.Dir(), "keep"))
	require.NoError(t, err)
	require.Equal(t, "kept", string(b))
	root, err := e.Root(ctx, "s")
	require.NoError(t, err)
	files, err := readAll(ctx, rec, root)
	require.NoError(t, err)
	require.Equal(t, "kept", string(files["keep"]))
}

func TestGCGuardWaits(t *testing.T) {
	ctx := context.Background()
	e, rec := newGCEngine(t)
	started := make(chan struct{})
	release := make(chan struct{})
	var ref cas.Ref
	go func() {
		_ = e.Guard(func() error {
			// Put before gc starts recording, name it after gc has begun.
			ref, _ = rec.Put(ctx, []byte("imported"))
			close(started)
			<-release
			root, err := manifest.BuildTree(ctx, rec, map[string]manifest.Entry{
				"f": {Kind: manifest.KindFile, Mode: 0o644, Size: 8, Chunks: []cas.Ref{ref}},
			})
			if err != nil {
				return err
			}
			h, err := e.Catalog().CreateSession(ctx, "imp", "")
			if err != nil {
				return err
			}
			_, err = e.Catalog().SetRoot(ctx, "imp", h.Gen, root, true)
			return err
		})
	}()
	<-started
	done := make(chan error, 1)
	go func() { _, err := e.GC(ctx, nil); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("gc finished while a guarded operation was running: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-done)
	has, err := rec.HasMany(ctx, []cas.Ref{ref})
	require.NoError(t, err)
	require.True(t, has[0], "chunk of the guarded import was collected")
}

// TestGCRacingWriters runs collections while writers create, overwrite
// and delete files (some large enough to spill chunks to the store before
// any flush) and a capturer takes snapshots. No byte that a session or a
// snapshot reaches may be lost.
func TestGCRacingWriters(t *testing.T) {
	ctx := context.Background()
	e, rec := newGCEngine(t)
	m := MountForTest(t, e, "s", "", MountOptions{})

	written := &gcWritten{files: make(map[string][]byte)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const writers = 4
	for w := range writers {
		wg.Go(func() { written.run(t, m.Dir(), w, stop) })
	}
	var snaps []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_, id, err := e.Capture(ctx, "s", fmt.Sprintf("snap %d", i), nil)
			if err != nil {
				t.Error(err)
				return
			}
			snaps = append(snaps, id)
		}
	}()

	var freed int64
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		// Unreachable garbage for every round to find.
		_, err := rec.Unwrap().Put(ctx, []byte(time.Now().String()))
		require.NoError(t, err)
		res, err := e.GC(ctx, nil)
		require.NoError(t, err)
		freed += res.Freed
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	require.Positive(t, freed)

	// One more collection with everything quiet, then check every byte.
	_, err := e.GC(ctx, nil)
	require.NoError(t, err)
	root, err := e.Root(ctx, "s")
	require.NoError(t, err)
	got, err := readAll(ctx, rec, root)
	require.NoError(t, err)
	written.mu.Lock()
	require.Equal(t, len(written.files), len(got))
	for name, data := range written.files {
		require.True(t, bytes.Equal(data, got[name]), "content of %s", name)
		b, err := os.ReadFile(filepath.Join(m.Dir(), name))
		require.NoError(t, err)
		require.True(t, bytes.Equal(data, b), "content of %s through the mount", name)
	}
	written.mu.Unlock()
	require.NotEmpty(t, snaps)
	for _, id := range snaps {
		snap, _, err := e.Catalog().Snapshot(ctx, id)
		require.NoError(t, err)
		require.NoError(t, catalog.VerifyComplete(ctx, rec, snap.Root), "snapshot %s", id)
		_, err = readAll(ctx, rec, snap.Root)
		require.NoError(t, err, "snapshot %s", id)
	}
}

// gcWritten is what TestGCRacingWriters' writers last wrote, by path
// below the mount.
type gcWritten struct {
	mu    sync.Mutex
	files map[string][]byte // GUARDED_BY(mu)
}

// run is writer w: until stop, it creates, overwrites (now and then with
// a file large enough to spill chunks before any flush) and deletes files
// below dir, recording each change.
func (g *gcWritten) run(t *testing.T, dir string, w int, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(uint64(w), 42))
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		name := fmt.Sprintf("w%d/f%d", w, rng.IntN(8))
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Error(err)
			return
		}
		switch rng.IntN(10) {
		case 0:
			if err := os.RemoveAll(p); err != nil {
				t.Error(err)
				return
			}
			g.mu.Lock()
			delete(g.files, name)
			g.mu.Unlock()
		default:
			size := 1 + rng.IntN(3*manifest.ChunkSize)
			if i%25 == 0 {
				size = spillThreshold + manifest.ChunkSize + rng.IntN(manifest.ChunkSize)
			}
			data := make([]byte, size)
			for j := range data {
				data[j] = byte(rng.IntN(4)) // compressible, with repeats across files
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Error(err)
				return
			}
			g.mu.Lock()
			g.files[name] = data
			g.mu.Unlock()
		}
	}
}

// TestGCKeepsOpenFiles: the content of a file unlinked, or replaced by a
// restore, while open is named by no head or snapshot, yet its descriptor
// still reads it; gc keeps it until the last close.
func TestGCKeepsOpenFiles(t *testing.T) {
	ctx := context.Background()
	e, rec := newGCEngine(t)
	m := MountForTest(t, e, "s", "", MountOptions{})
	_, before, err := e.Capture(ctx, "s", "before both files", nil)
	require.NoError(t, err)
	open := func(name string, data []byte) (*os.File, []cas.Ref) {
		p := filepath.Join(m.Dir(), name)
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644) // served by the daemon
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		_, err = f.Write(data)
		require.NoError(t, err)
		require.NoError(t, e.Sync(ctx, "s"))
		root, err := e.Root(ctx, "s")
		require.NoError(t, err)
		return f, chunkRefs(t, rec, root, name)
	}
	present := func(refs []cas.Ref) bool {
		has, err := rec.HasMany(ctx, refs)
		require.NoError(t, err)
		for _, h := range has {
			if !h {
				return false
			}
		}
		return true
	}
	reads := func(f *os.File, want []byte) {
		got := make([]byte, len(want))
		_, err := f.ReadAt(got, 0)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
	unlinkedData := randBytes(41, 3*manifest.ChunkSize+100)
	unlinked, unlinkedRefs := open("unlinked", unlinkedData)
	require.NoError(t, os.Remove(filepath.Join(m.Dir(), "unlinked")))
	require.NoError(t, e.Sync(ctx, "s"))
	restoredData := randBytes(42, 2*manifest.ChunkSize+7)
	restored, restoredRefs := open("restored", restoredData)
	require.NoError(t, e.Restore(ctx, "s", before))
	_, err = os.Stat(filepath.Join(m.Dir(), "restored"))
	require.ErrorIs(t, err, os.ErrNotExist)

	_, err = e.GC(ctx, nil)
	require.NoError(t, err)
	require.True(t, present(unlinkedRefs), "the chunks of an unlinked open file are kept")
	require.True(t, present(restoredRefs), "the chunks of a file open across a restore are kept")
	reads(unlinked, unlinkedData)
	reads(restored, restoredData)

	require.NoError(t, unlinked.Close())
	require.NoError(t, restored.Close())
	require.Eventually(t, func() bool { // the kernel releases asynchronously
		_, err := e.GC(ctx, nil)
		require.NoError(t, err)
		return !present(unlinkedRefs) && !present(restoredRefs)
	}, 5*time.Second, 50*time.Millisecond, "freed once the last descriptor is closed")
}
