package fusefs

import (
	"context"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// gcHookStore lets a test act at two points of a collection: when the
// mark lists the session heads (recording on, every session synced), and
// when the sweep enumerates the store (the mark is done).
type gcHookStore struct {
	cas.Store
	onMark, onSweep func()
	marked, swept   atomic.Bool
}

func (h *gcHookStore) ListNames(ctx context.Context, prefix string, fn func(string, []byte) error) error {
	if prefix == "session/" && h.onMark != nil && h.marked.CompareAndSwap(false, true) {
		h.onMark()
	}
	return h.Store.ListNames(ctx, prefix, fn)
}

func (h *gcHookStore) Enumerate(ctx context.Context, fn func(cas.ChunkInfo) error) error {
	if h.onSweep != nil && h.swept.CompareAndSwap(false, true) {
		h.onSweep()
	}
	return h.Store.Enumerate(ctx, fn)
}

func newHookEngine(t *testing.T) (*Engine, *Recorder, *gcHookStore) {
	hs := &gcHookStore{Store: cas.NewMemory()}
	rec := Record(hs)
	e := New(rec, catalog.New(rec), Options{
		StoreDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e, rec, hs
}

func gcEntryAt(t *testing.T, g cas.Getter, root cas.Ref, name string) *manifest.Entry {
	tr, err := manifest.GetTree(context.Background(), g, root)
	require.NoError(t, err)
	for i := range tr.Entries {
		if tr.Entries[i].Name == name {
			e := tr.Entries[i]
			return &e
		}
	}
	t.Fatalf("%s not in tree", name)
	return nil
}

// A Guard operation that begins after gc started recording (Bind:
// Engine.Root of the source, then Graft into the target) names chunks it
// never put. gc does not wait for it, and the source moves on before the
// mark: the target's head ends up naming a deleted chunk.
func TestGCGuardedBindAfterRecording(t *testing.T) {
	ctx := context.Background()
	e, rec, hs := newHookEngine(t)
	for _, s := range []string{"src", "tgt"} {
		_, err := e.Catalog().CreateSession(ctx, s, "")
		require.NoError(t, err)
	}
	data := randBytes(99, 1000)
	ref, err := rec.Put(ctx, data)
	require.NoError(t, err)
	require.NoError(t, e.Graft(ctx, "src", "rollout", &manifest.Entry{Kind: manifest.KindFile, Mode: 0o644, Size: int64(len(data)), Chunks: []cas.Ref{ref}}, nil))

	read, proceed, bound := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	hs.onMark = func() {
		go func() {
			bound <- e.Guard(func() error { // a bind, begun now
				root, err := e.Root(ctx, "src")
				if err != nil {
					return err
				}
				ent := gcEntryAt(t, rec, root, "rollout")
				close(read)
				<-proceed
				return e.Graft(ctx, "tgt", "rollout", ent, nil)
			})
		}()
		select { // a fixed gc holds the bind back: nothing to race
		case <-read:
		case <-time.After(200 * time.Millisecond):
			return
		}
		// The agent in src rewrites its file meanwhile (flushed).
		require.NoError(t, e.Remove(ctx, "src", "rollout"))
	}
	hs.onSweep = func() {
		close(proceed)
		select { // a fixed gc may hold the bind back until it ends
		case err := <-bound:
			bound <- err
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, err = e.GC(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, <-bound)

	root, err := e.Root(ctx, "tgt")
	require.NoError(t, err)
	_, err = readAll(ctx, rec, root)
	require.NoError(t, err, "the bound file's chunk was collected")
}

// Pull's order (remote.Pull under Guard): nodes already in the local store
// are read, not put; the snapshot is registered after. Begun after gc
// started recording, it registers a tree gc then sweeps.
func TestGCGuardedPullOfLocalGarbage(t *testing.T) {
	ctx := context.Background()
	e, rec, hs := newHookEngine(t)
	_, err := e.Catalog().CreateSession(ctx, "a", "")
	require.NoError(t, err)
	data := randBytes(7, 3*manifest.ChunkSize)
	chunks := make([]cas.Ref, 0, 3)
	for i := range 3 {
		r, err := rec.Put(ctx, data[i*manifest.ChunkSize:(i+1)*manifest.ChunkSize])
		require.NoError(t, err)
		chunks = append(chunks, r)
	}
	require.NoError(t, e.Graft(ctx, "a", "f", &manifest.Entry{Kind: manifest.KindFile, Mode: 0o644, Size: int64(len(data)), Chunks: chunks}, nil))
	_, id, err := e.Capture(ctx, "a", "pushed earlier", nil)
	require.NoError(t, err)
	raw, snap, err := e.Catalog().Record(ctx, id)
	require.NoError(t, err)
	remote := cas.NewMemory() // what the remote holds of it
	require.NoError(t, manifest.WalkRefs(ctx, rec, snap.Root, func(ref cas.Ref, _ manifest.RefKind, _ string) error {
		b, err := rec.Get(ctx, ref)
		if err == nil {
			_, err = remote.Put(ctx, b)
		}
		return err
	}))
	// Forgotten here (the remote still has it); its tree is local garbage.
	_, err = e.PurgeSession(ctx, "a", nil)
	require.NoError(t, err)

	read, proceed, pulled := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	hs.onMark = func() {
		go func() {
			pulled <- e.Guard(func() error {
				// fetchAll/pullChunks: what the local store has is read or
				// skipped (no Put), the rest fetched and put.
				err := manifest.WalkRefs(ctx, remote, snap.Root, func(ref cas.Ref, _ manifest.RefKind, _ string) error {
					has, err := rec.HasMany(ctx, []cas.Ref{ref})
					if err != nil || has[0] {
						return err
					}
					b, err := remote.Get(ctx, ref)
					if err == nil {
						_, err = rec.Put(ctx, b)
					}
					return err
				})
				if err != nil {
					return err
				}
				close(read)
				<-proceed
				_, _, err = e.Catalog().AddSnapshot(ctx, raw)
				return err
			})
		}()
		select {
		case <-read:
		case <-time.After(200 * time.Millisecond):
		}
	}
	hs.onSweep = func() {
		close(proceed)
		select {
		case err := <-pulled:
			pulled <- err
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, err = e.GC(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, <-pulled)
	require.NoError(t, catalog.VerifyComplete(ctx, rec, snap.Root), "pulled snapshot %s lost its tree", id[:12])
}
