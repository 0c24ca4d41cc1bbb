package manifest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/homefs/homefs/cas"
)

func TestIndexRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		depth uint8
		refs  []cas.Ref
	}{
		{1, []cas.Ref{{}}},
		{1, fixtureIndex()},
		{2, []cas.Ref{fakeRef("a"), fakeRef("b")}},
		{MaxIndexDepth, make([]cas.Ref, IndexFanout)},
	} {
		if tc.depth > 1 {
			for i := range tc.refs {
				tc.refs[i] = fakeRef("%d", i)
			}
		}
		b, err := EncodeIndex(tc.depth, tc.refs)
		if err != nil {
			t.Fatal(err)
		}
		d, refs, err := DecodeIndex(b)
		if err != nil || d != tc.depth || len(refs) != len(tc.refs) {
			t.Fatalf("depth %d: got depth %d, %d refs, %v", tc.depth, d, len(refs), err)
		}
		again, _ := EncodeIndex(d, refs)
		if !bytes.Equal(again, b) {
			t.Fatal("re-encoding differs")
		}
	}
}

func TestIndexRejects(t *testing.T) {
	for _, tc := range []struct {
		what  string
		depth uint8
		refs  []cas.Ref
	}{
		{"depth 0", 0, []cas.Ref{fakeRef("a")}},
		{"depth over max", MaxIndexDepth + 1, []cas.Ref{fakeRef("a")}},
		{"no refs", 1, nil},
		{"over fanout", 1, make([]cas.Ref, IndexFanout+1)},
		{"zero ref above leaves", 2, []cas.Ref{fakeRef("a"), {}}},
	} {
		if _, err := EncodeIndex(tc.depth, tc.refs); !errors.Is(err, ErrInvalid) {
			t.Errorf("encode %s: got %v", tc.what, err)
		}
	}
	good, _ := EncodeIndex(1, fixtureIndex())
	for _, tc := range []struct {
		what string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"tree magic", append([]byte(treeMagic), good[4:]...), ErrMalformed},
		{"version", append([]byte("HFSI\x09"), good[5:]...), ErrUnsupportedVersion},
		{"truncated", good[:len(good)-1], ErrMalformed},
		{"trailing", append(bytes.Clone(good), 0), ErrMalformed},
		{"non-minimal count", append([]byte("HFSI\x01\x01\x85\x00"), good[7:]...), ErrMalformed},
		{"count over fanout", []byte("HFSI\x01\x01\x81\x08"), ErrMalformed},
		{"depth 0", append([]byte("HFSI\x01\x00"), good[6:]...), ErrInvalid},
		{"zero count", []byte("HFSI\x01\x01\x00"), ErrInvalid},
		{"too large", make([]byte, MaxNodeSize+1), ErrTooLarge},
	} {
		if _, _, err := DecodeIndex(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("decode %s: got %v, want %v", tc.what, err, tc.want)
		}
	}
}

// storeFresh stores the chunks with no cached state: the reference result
// incremental Stores must match.
func storeFresh(t *testing.T, s cas.Putter, chunks []cas.Ref) (cas.Ref, uint8, []cas.Ref) {
	t.Helper()
	c := NewChunkList()
	for i, r := range chunks {
		c.Set(i, r)
	}
	c.Truncate(len(chunks))
	inline, index, depth, err := c.Store(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	return index, depth, inline
}

func TestChunkListIncremental(t *testing.T) {
	for seed := range uint64(4) {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) { testChunkListIncremental(t, seed) })
	}
}

func testChunkListIncremental(t *testing.T, seed uint64) {
	ctx := context.Background()
	s := newStore()
	rng := rand.New(rand.NewPCG(seed, 2))
	c := NewChunkList()
	var model []cas.Ref
	sizes := []int{0, 5, MaxInlineChunks, MaxInlineChunks + 1, IndexFanout, IndexFanout + 1, 3*IndexFanout - 1, IndexFanout*IndexFanout + 3}
	for step := range 300 {
		switch op := rng.IntN(10); {
		case op < 5: // set, sometimes past the end
			n := len(model) + 2
			i := rng.IntN(n)
			r := fakeRef("step %d", step)
			if rng.IntN(5) == 0 {
				r = cas.Ref{}
			}
			c.Set(i, r)
			for len(model) <= i {
				model = append(model, cas.Ref{})
			}
			model[i] = r
		case op < 7: // append a run
			for range rng.IntN(2 * IndexFanout) {
				r := fakeRef("append %d %d", step, len(model))
				c.Set(len(model), r)
				model = append(model, r)
			}
		case op < 8: // truncate to a size around a boundary
			n := max(0, sizes[rng.IntN(len(sizes))]+rng.IntN(3)-1)
			if n > 5*IndexFanout { // keep the test fast
				n = rng.IntN(len(model) + 1)
			}
			c.Truncate(n)
			if n <= len(model) {
				model = model[:n]
			} else {
				model = append(model, make([]cas.Ref, n-len(model))...)
			}
		default: // store and compare with a fresh store
			inline, index, depth, err := c.Store(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			wantIndex, wantDepth, wantInline := storeFresh(t, s, model)
			if index != wantIndex || depth != wantDepth || !equalRefs(inline, wantInline) {
				t.Fatalf("step %d (%d chunks): incremental store (%s, %d) differs from fresh (%s, %d)",
					step, len(model), index.Short(), depth, wantIndex.Short(), wantDepth)
			}
			if rng.IntN(3) == 0 { // reload from the store
				size := int64(len(model)) * ChunkSize
				e := &Entry{Name: "f", Kind: KindFile, Size: size, Chunks: inline, Index: index, Depth: depth}
				if c, err = LoadChunkList(ctx, s, e); err != nil {
					t.Fatal(err)
				}
			}
		}
		if c.Len() != len(model) {
			t.Fatalf("step %d: Len %d, want %d", step, c.Len(), len(model))
		}
	}
}

func equalRefs(a, b []cas.Ref) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestChunkListAppendIsO1(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	const n = (1 << 30) / ChunkSize // 1 GiB
	c := NewChunkList()
	for i := range n {
		c.Set(i, fakeRef("%d", i))
	}
	_, index, depth, err := c.Store(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if depth != 2 {
		t.Fatalf("depth %d", depth)
	}
	e := &Entry{Name: "f", Kind: KindFile, Size: n * ChunkSize, Index: index, Depth: depth}
	c, err = LoadChunkList(ctx, s, e)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if c.At(i) != fakeRef("%d", i) {
			t.Fatalf("chunk %d differs after load", i)
		}
	}
	s.resetCounts()
	c.Set(n, fakeRef("appended"))
	if _, _, _, err := c.Store(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := s.puts.Load(); got != 2 {
		t.Errorf("append stored %d nodes, want 2 (a leaf and the root)", got)
	}
	s.resetCounts()
	c.Set(5, fakeRef("changed"))
	if _, _, _, err := c.Store(ctx, s); err != nil {
		t.Fatal(err)
	}
	if got := s.puts.Load(); got != 2 {
		t.Errorf("overwrite stored %d nodes, want 2", got)
	}
	s.resetCounts()
	if _, _, _, err := c.Store(ctx, s); err != nil || s.puts.Load() != 0 {
		t.Errorf("unchanged store put %d nodes, %v", s.puts.Load(), err)
	}
}

func TestLoadChunkListRejects(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	c := NewChunkList()
	for i := range 2*IndexFanout + 1 {
		c.Set(i, fakeRef("%d", i))
	}
	_, index, depth, err := c.Store(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(2*IndexFanout+1) * ChunkSize
	for _, tc := range []struct {
		what string
		e    Entry
		want error
	}{
		{"not a file", Entry{Name: "d", Kind: KindDir, Tree: index}, ErrInvalid},
		{"size too small for index", Entry{Name: "f", Kind: KindFile, Size: (2*IndexFanout - 5) * ChunkSize, Index: index, Depth: depth}, ErrInvalid},
		{"size too big for index", Entry{Name: "f", Kind: KindFile, Size: size + ChunkSize, Index: index, Depth: depth}, ErrInvalid},
		{"missing node", Entry{Name: "f", Kind: KindFile, Size: size, Index: fakeRef("nothing"), Depth: depth}, cas.ErrNotFound},
		{"depth mismatch", Entry{Name: "f", Kind: KindFile, Size: (IndexFanout*IndexFanout + 1) * ChunkSize, Index: index, Depth: 3}, ErrInvalid},
	} {
		_, err := LoadChunkList(ctx, s, &tc.e)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, err, tc.want)
		}
	}
	if _, err := LoadChunkList(ctx, s, &Entry{Name: "f", Kind: KindFile, Size: size, Index: index, Depth: depth}); err != nil {
		t.Fatal(err)
	}
}
