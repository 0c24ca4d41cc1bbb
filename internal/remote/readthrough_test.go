package remote

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/manifest"
)

// fileChunks returns the chunk list of every file of snapshot id, by path.
func fileChunks(t *testing.T, h *host, id string) map[string][]cas.Ref {
	t.Helper()
	ctx := context.Background()
	snap, _, err := h.cat.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string][]cas.Ref)
	err = manifest.Walk(ctx, h.store, snap.Root, func(path string, e *manifest.Entry) error {
		if e.Kind != manifest.KindFile {
			return nil
		}
		cl, err := manifest.LoadChunkList(ctx, h.store, e)
		if err != nil {
			return err
		}
		for i := range cl.Len() {
			out[path] = append(out[path], cl.At(i))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Readers of a lazily pulled snapshot, many at once, each reading every
// file from its start while read-ahead runs in front of them, fetch each
// chunk from the remote once.
func TestLazyFetchesOnce(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	r := openRemote(t, srv, srv.Bucket(t))
	a, b := newHost(t), newHost(t)
	want := files{}
	for i := range 8 {
		want[fmt.Sprintf("f%d.bin", i)] = randomBytes(uint64(200+i), 24*manifest.ChunkSize)
	}
	id := a.capture(t, "s1", want)
	if _, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	pr, err := Pull(ctx, b.store, b.cat, r, "s1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	chunks := fileChunks(t, b, id)
	paths := make([]string, 0, len(chunks))
	unique := make(map[cas.Ref]struct{})
	for p, refs := range chunks {
		paths = append(paths, p)
		for _, ref := range refs {
			unique[ref] = struct{}{}
		}
	}
	rt := NewReadThrough(b.store, ReadThroughOptions{Logger: testLogger()}, r)
	if err := rt.Hint(ctx, pr.Snapshot.Root); err != nil {
		t.Fatal(err)
	}
	before := r.Stats().Gets

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for reader := range 16 {
		wg.Go(func() {
			for k := range paths {
				p := paths[(reader/2+k)%len(paths)]
				var got []byte
				for _, ref := range chunks[p] {
					data, err := rt.Get(ctx, ref)
					if err != nil {
						errs <- fmt.Errorf("reader %d: %s: %w", reader, p, err)
						return
					}
					got = append(got, data...)
				}
				if !bytes.Equal(got, want[p]) {
					errs <- fmt.Errorf("reader %d: %s: wrong bytes", reader, p)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Close waits for the read-ahead still running.
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	gets := r.Stats().Gets - before
	st := rt.Stats()
	t.Logf("%d chunks, %d GETs; fetched %d for readers, %d ahead", len(unique), gets, st.Fetched, st.Prefetched)
	if gets != int64(len(unique)) || st.Fetched+st.Prefetched != int64(len(unique)) {
		t.Fatalf("%d GETs (%d fetches) for %d chunks", gets, st.Fetched+st.Prefetched, len(unique))
	}
}
