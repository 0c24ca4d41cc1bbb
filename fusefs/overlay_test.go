package fusefs

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/manifest"
)

// TestOverlayModel drives small writes into stored chunks (overlays), reads,
// truncates, hole punches, spills and flushes against a byte-slice model;
// the content must match at every read and in a fork of the final state.
func TestOverlayModel(t *testing.T) {
	t.Parallel()
	e := NewTestEngine(t, nil)
	ctx := context.Background()
	s, n := liveFile(t, e, "db")
	var err error
	model := randBytes(3, 10*manifest.ChunkSize+1234)
	_, err = s.Write(ctx, n, model, 0, WriteOp{})
	require.NoError(t, err)
	require.NoError(t, e.Sync(ctx, "s"))

	// A page written into a stored chunk buffers the page, not the chunk.
	page := randBytes(4, 4096)
	_, err = s.Write(ctx, n, page, 3*manifest.ChunkSize+8192, WriteOp{})
	require.NoError(t, err)
	copy(model[3*manifest.ChunkSize+8192:], page)
	n.mu.Lock()
	whole, overlay := n.data.dirtyBytes, n.data.overlayBytes
	n.mu.Unlock()
	require.Equal(t, int64(0), whole)
	require.Equal(t, int64(4096), overlay, "an overlay holds what was written")

	rng := rand.New(rand.NewPCG(9, 9))
	check := func(off, l int) {
		got := make([]byte, l)
		k, err := s.Read(ctx, n, got, int64(off))
		require.NoError(t, err)
		want := model[min(off, len(model)):min(off+l, len(model))]
		require.Equal(t, len(want), k)
		require.True(t, bytes.Equal(want, got[:k]), "read %d+%d", off, l)
	}
	for op := range 3000 {
		size := len(model)
		switch r := rng.IntN(100); {
		case r < 55: // small write, mostly inside the file
			l := 1 + rng.IntN(6000)
			off := rng.IntN(size + 2000)
			p := randBytes(uint64(op), l)
			_, err := s.Write(ctx, n, p, int64(off), WriteOp{})
			require.NoError(t, err)
			if end := off + l; end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], p)
		case r < 85:
			check(rng.IntN(size+10), 1+rng.IntN(3*manifest.ChunkSize))
		case r < 89:
			l := max(0, size+rng.IntN(3*manifest.ChunkSize)-int(1.5*manifest.ChunkSize))
			require.NoError(t, s.Setattr(ctx, n, SetAttr{Size: ptr(int64(l))}))
			if l < len(model) {
				model = model[:l]
			} else {
				model = append(model, make([]byte, l-len(model))...)
			}
		case r < 92:
			off, l := rng.IntN(size+1), 1+rng.IntN(2*manifest.ChunkSize)
			require.NoError(t, s.Allocate(ctx, n, int64(off), int64(l), fallocPunchHole|fallocKeepSize, privDrop{}))
			clear(model[min(off, len(model)):min(off+l, len(model))])
		case r < 96:
			n.mu.Lock()
			b := s.newBatch()
			err := n.spill(ctx, b, -1, rng.IntN(2) == 0)
			if err == nil {
				err = b.Commit(ctx, false)
			}
			b.Discard()
			n.mu.Unlock()
			require.NoError(t, err)
		default:
			require.NoError(t, e.Sync(ctx, "s"))
		}
	}
	check(0, len(model)+10)
	require.NoError(t, e.Sync(ctx, "s"))
	check(0, len(model)+10)
	fm := forkMount(t, e, "s", "after")
	got, err := os.ReadFile(filepath.Join(fm.Dir(), "db"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(model, got), "the stored file: %d bytes, want %d", len(got), len(model))
}

func ptr[T any](v T) *T { return &v }
