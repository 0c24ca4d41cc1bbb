package catalog

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// bigFile puts a file of n one-byte-distinct chunks stored through an
// index node (n > MaxInlineChunks), returning its entry and chunk refs.
func bigFile(t *testing.T, st cas.Store, seed string, n int) (manifest.Entry, []cas.Ref) {
	t.Helper()
	ctx := context.Background()
	cl := manifest.NewChunkList()
	var refs []cas.Ref
	for i := range n {
		ref, err := st.Put(ctx, fmt.Appendf(nil, "%s chunk %d", seed, i))
		require.NoError(t, err)
		cl.Set(i, ref)
		refs = append(refs, ref)
	}
	chunks, index, depth, err := cl.Store(ctx, st)
	require.NoError(t, err)
	return manifest.Entry{Kind: manifest.KindFile, Mode: 0o644, Size: int64(n) * manifest.ChunkSize,
		Chunks: chunks, Index: index, Depth: depth}, refs
}

func TestVerifyComplete(t *testing.T) {
	ctx := context.Background()
	build := func(t *testing.T) (cas.Store, cas.Ref, map[string]cas.Ref) {
		st := newTestStore(t)
		big, bigRefs := bigFile(t, st, "big", 40)
		small, err := st.Put(ctx, []byte("hello"))
		require.NoError(t, err)
		files := map[string]manifest.Entry{
			"workspace/big.bin":       big,
			"workspace/src/a.go":      {Kind: manifest.KindFile, Mode: 0o644, Size: 5, Chunks: []cas.Ref{small}},
			"workspace/src/copy.go":   {Kind: manifest.KindFile, Mode: 0o644, Size: 5, Chunks: []cas.Ref{small}},
			"workspace/hole":          {Kind: manifest.KindFile, Mode: 0o644, Size: 10, Chunks: []cas.Ref{{}}},
			"codex-home/link":         {Kind: manifest.KindSymlink, Mode: 0o777, Size: 3, Target: "../"},
			"codex-home/sessions/new": {Kind: manifest.KindDir, Mode: 0o700},
		}
		root, err := manifest.BuildTree(ctx, st, files)
		require.NoError(t, err)
		srcTree := findTree(t, st, root, "workspace/src")
		return st, root, map[string]cas.Ref{
			"small": small, "big17": bigRefs[17], "index": big.Index, "src": srcTree,
		}
	}

	tests := []struct {
		name     string
		drop     []string
		wantPath string
	}{
		{name: "complete"},
		{name: "chunk", drop: []string{"small"}, wantPath: `"workspace/src/a.go"`},
		{name: "chunk under index", drop: []string{"big17"}, wantPath: `"workspace/big.bin"`},
		{name: "index node", drop: []string{"index"}, wantPath: "workspace/big.bin"},
		{name: "tree node", drop: []string{"src"}, wantPath: "workspace/src"},
		{name: "two", drop: []string{"big17", "small"}, wantPath: "2 missing chunks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, root, refs := build(t)
			for _, d := range tt.drop {
				require.NoError(t, st.Delete(ctx, refs[d]))
			}
			err := VerifyComplete(ctx, st, root)
			if tt.drop == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, cas.ErrNotFound)
			assert.Contains(t, err.Error(), tt.wantPath)
		})
	}

	t.Run("root missing", func(t *testing.T) {
		st := newTestStore(t)
		err := VerifyComplete(ctx, st, manifest.EmptyTreeRef())
		assert.ErrorIs(t, err, cas.ErrNotFound)
	})
	t.Run("corrupt tree node", func(t *testing.T) {
		st, root, refs := build(t)
		require.NoError(t, st.(cas.Corrupter).CorruptForTest(refs["src"]))
		err := VerifyComplete(ctx, st, root)
		assert.ErrorIs(t, err, cas.ErrCorrupt)
	})
}

// TestVerifyBatches: HasMany is asked in batches, not once per chunk.
func TestVerifyBatches(t *testing.T) {
	ctx := context.Background()
	st := &hasCountStore{Store: newTestStore(t)}
	root := buildTree(t, st, "x", 3*hasBatch+5)
	require.NoError(t, VerifyComplete(ctx, st, root))
	assert.Equal(t, 4, st.calls)
	assert.LessOrEqual(t, st.max, hasBatch)
}

type hasCountStore struct {
	cas.Store
	calls, max int
}

func (s *hasCountStore) HasMany(ctx context.Context, refs []cas.Ref) ([]bool, error) {
	s.calls++
	s.max = max(s.max, len(refs))
	return s.Store.HasMany(ctx, refs)
}

func findTree(t *testing.T, g cas.Getter, root cas.Ref, path string) cas.Ref {
	t.Helper()
	var found cas.Ref
	err := manifest.WalkRefs(context.Background(), g, root, func(ref cas.Ref, kind manifest.RefKind, p string) error {
		if kind == manifest.TreeNode && p == path {
			found = ref
		}
		return nil
	})
	require.NoError(t, err)
	require.False(t, found.IsZero(), "no tree at %s", path)
	return found
}

func TestReachable(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a1 := capture(t, c, st, "a", "1")
	a2 := capture(t, c, st, "a", "2")
	_, err = c.Fork(ctx, a1, "b")
	require.NoError(t, err)
	bRoot := buildTree(t, st, "b-work", 3)
	h, err := c.Head(ctx, "b")
	require.NoError(t, err)
	_, err = c.SetRoot(ctx, "b", h.Gen, bRoot, false) // flushed, not captured
	require.NoError(t, err)
	require.NoError(t, c.DeleteSession(ctx, "a")) // a's snapshots stay
	garbage, err := st.Put(ctx, []byte("unreferenced"))
	require.NoError(t, err)

	want := map[cas.Ref]bool{}
	for _, root := range []cas.Ref{bRoot} {
		addRefs(t, st, root, want)
	}
	for _, id := range []string{a1, a2} {
		snap, _, err := c.Snapshot(ctx, id)
		require.NoError(t, err)
		want[cas.MustParseRef("sha256:"+id)] = true
		addRefs(t, st, snap.Root, want)
	}

	got := map[cas.Ref]bool{}
	err = Reachable(ctx, st, func(r cas.Ref) error {
		assert.False(t, got[r], "ref %s reported twice", r.Short())
		got[r] = true
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, want, got)
	assert.False(t, got[garbage])

	// Everything stored but the garbage (and the empty tree a was
	// created with, no longer referenced) is reachable.
	var stored int
	require.NoError(t, st.Enumerate(ctx, func(ci cas.ChunkInfo) error {
		if !got[ci.Ref] && ci.Ref != garbage && ci.Ref != manifest.EmptyTreeRef() {
			t.Errorf("stored ref %s not reachable", ci.Ref.Short())
		}
		stored++
		return nil
	}))
	assert.Equal(t, len(got)+2, stored)

	t.Run("missing record", func(t *testing.T) {
		require.NoError(t, st.Delete(ctx, cas.MustParseRef("sha256:"+a1)))
		err := Reachable(ctx, st, func(cas.Ref) error { return nil })
		assert.ErrorIs(t, err, cas.ErrNotFound)
	})
}

func addRefs(t *testing.T, g cas.Getter, root cas.Ref, into map[cas.Ref]bool) {
	t.Helper()
	require.NoError(t, manifest.WalkRefs(context.Background(), g, root, func(r cas.Ref, _ manifest.RefKind, _ string) error {
		into[r] = true
		return nil
	}))
}
