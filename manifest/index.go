package manifest

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"slices"

	"github.com/homefs/homefs/cas"
)

// EncodeIndex returns the canonical encoding of an index node of the given
// depth: at depth 1 refs are chunk refs (zero = hole), above they are refs
// of index nodes one level down (never zero). A node holds 1 to
// IndexFanout refs.
//
// Layout: "HFSI" version:byte depth:byte count:uvarint ref*count
func EncodeIndex(depth uint8, refs []cas.Ref) ([]byte, error) {
	if err := validateIndex(depth, refs); err != nil {
		return nil, err
	}
	b := make([]byte, 0, headerLen+1+binary.MaxVarintLen16+len(refs)*len(cas.Ref{}))
	b = append(b, indexMagic...)
	b = append(b, FormatVersion, depth)
	b = binary.AppendUvarint(b, uint64(len(refs)))
	for i := range refs {
		b = append(b, refs[i][:]...)
	}
	return b, nil
}

func validateIndex(depth uint8, refs []cas.Ref) error {
	if depth < 1 || depth > MaxIndexDepth {
		return errf(ErrInvalid, "index: depth %d, want 1 to %d", depth, MaxIndexDepth)
	}
	if len(refs) < 1 || len(refs) > IndexFanout {
		return errf(ErrInvalid, "index: %d refs, want 1 to %d", len(refs), IndexFanout)
	}
	if depth > 1 {
		for i := range refs {
			if refs[i].IsZero() {
				return errf(ErrInvalid, "index: depth %d: zero ref at %d", depth, i)
			}
		}
	}
	return nil
}

// DecodeIndex parses and validates an index node; only the canonical
// encoding is accepted.
func DecodeIndex(b []byte) (depth uint8, refs []cas.Ref, err error) {
	if len(b) > MaxNodeSize {
		return 0, nil, errf(ErrTooLarge, "index: %d bytes, over %d", len(b), MaxNodeSize)
	}
	if err := checkHeader(b, indexMagic, "index", FormatVersion); err != nil {
		return 0, nil, err
	}
	d := decoder{s: string(b[headerLen:])}
	depth = d.byte()
	n := d.uvarint(IndexFanout)
	if d.err != nil {
		return 0, nil, d.fail("index: header")
	}
	if uint64(len(d.s)) != n*uint64(len(cas.Ref{})) {
		return 0, nil, errf(ErrMalformed, "index: %d refs need %d bytes, have %d", n, n*uint64(len(cas.Ref{})), len(d.s))
	}
	refs = make([]cas.Ref, n)
	for i := range refs {
		refs[i] = d.ref()
	}
	if err := validateIndex(depth, refs); err != nil {
		return 0, nil, err
	}
	return depth, refs, nil
}

// ChunkList is the chunk refs of one file being modified in the live
// filesystem. It remembers the index nodes it was loaded from or last
// stored, so Store re-writes only the leaves changed since (and their
// ancestors): appending to a 1 GiB file stores two small nodes, not the
// whole index. A ChunkList is not safe for concurrent use.
type ChunkList struct {
	chunks []cas.Ref
	// levels[k] holds the refs of the index nodes at depth k+1 as last
	// stored or loaded; level 0 are the leaves. Empty when inline.
	levels [][]cas.Ref
	// stored is len(chunks) at the last Store or Load; low is the least
	// length since (Truncate), so chunks from low on may have changed.
	stored, low int
	// dirty holds the leaves whose chunks changed by Set since the last
	// Store or Load.
	dirty map[int]struct{}
}

// NewChunkList returns an empty list (an empty file).
func NewChunkList() *ChunkList { return &ChunkList{dirty: map[int]struct{}{}} }

// LoadChunkList reads the chunk refs of a file entry, inline or through
// its index nodes, checking that the index matches the entry's size.
func LoadChunkList(ctx context.Context, g cas.Getter, e *Entry) (*ChunkList, error) {
	if e.Kind != KindFile {
		return nil, errf(ErrInvalid, "entry %q: chunk list of a %v", e.Name, e.Kind)
	}
	if err := validateContent(e.Size, e.Chunks, e.Index, e.Depth); err != nil {
		return nil, wrapf(err, "entry %q", e.Name)
	}
	c := NewChunkList()
	n := ChunkCount(e.Size)
	if e.Depth == 0 {
		c.chunks = append([]cas.Ref(nil), e.Chunks...)
		c.reset(nil)
		return c, nil
	}
	// counts[k] is the number of nodes at depth k+1; counts[depth] == 1.
	counts := make([]int, e.Depth+1)
	counts[0] = n
	for k := 1; k <= int(e.Depth); k++ {
		counts[k] = (counts[k-1] + IndexFanout - 1) / IndexFanout
	}
	c.levels = make([][]cas.Ref, e.Depth)
	c.levels[e.Depth-1] = []cas.Ref{e.Index}
	for depth := e.Depth; depth >= 1; depth-- {
		nodes := c.levels[depth-1]
		children := make([]cas.Ref, 0, counts[depth-1])
		for j, ref := range nodes {
			b, err := g.Get(ctx, ref)
			if err != nil {
				return nil, fmt.Errorf("manifest: entry %q: index node %s: %w", e.Name, ref.Short(), err)
			}
			d, refs, err := DecodeIndex(b)
			if err != nil {
				return nil, fmt.Errorf("manifest: entry %q: index node %s: %w", e.Name, ref.Short(), err)
			}
			// Every node is full except the last of its level.
			want := min(IndexFanout, counts[depth-1]-j*IndexFanout)
			if d != depth || len(refs) != want {
				return nil, errf(ErrInvalid, "entry %q: index node %s: depth %d with %d refs, want depth %d with %d",
					e.Name, ref.Short(), d, len(refs), depth, want)
			}
			children = append(children, refs...)
		}
		if depth == 1 {
			c.chunks = children
		} else {
			c.levels[depth-2] = children
		}
	}
	c.reset(c.levels)
	return c, nil
}

// Len returns the number of chunks.
func (c *ChunkList) Len() int { return len(c.chunks) }

// At returns the ref of chunk i (zero for a hole).
func (c *ChunkList) At(i int) cas.Ref { return c.chunks[i] }

// Set sets chunk i to r, growing the list with holes as needed.
func (c *ChunkList) Set(i int, r cas.Ref) {
	if i < 0 {
		panic(fmt.Sprintf("manifest: ChunkList.Set(%d)", i))
	}
	if i >= len(c.chunks) {
		c.chunks = append(c.chunks, make([]cas.Ref, i+1-len(c.chunks))...)
	} else if c.chunks[i] == r {
		return
	}
	c.chunks[i] = r
	c.dirty[i/IndexFanout] = struct{}{}
}

// Truncate shortens or extends (with holes) the list to n chunks.
func (c *ChunkList) Truncate(n int) {
	if n < 0 {
		panic(fmt.Sprintf("manifest: ChunkList.Truncate(%d)", n))
	}
	if n <= len(c.chunks) {
		clear(c.chunks[n:])
		c.chunks = c.chunks[:n]
		c.low = min(c.low, n)
		return
	}
	c.chunks = append(c.chunks, make([]cas.Ref, n-len(c.chunks))...)
}

// Store writes the index nodes changed since the last Store or Load and
// returns the entry fields: either chunks (inline, depth 0) or the root
// index ref and its depth. The returned chunks are a copy.
func (c *ChunkList) Store(ctx context.Context, p cas.Putter) (chunks []cas.Ref, index cas.Ref, depth uint8, err error) {
	n := len(c.chunks)
	if n <= MaxInlineChunks {
		c.reset(nil)
		if n == 0 {
			return nil, cas.Ref{}, 0, nil
		}
		return append([]cas.Ref(nil), c.chunks...), cas.Ref{}, 0, nil
	}
	// Chunks from first on may have appeared, vanished or been zeroed by
	// Truncate: every node covering them is re-written, besides the leaves
	// changed by Set. A node before them keeps its children (a leaf ending
	// just before first was full and stays full).
	first := -1
	switch {
	case len(c.levels) == 0:
		first = 0
	case n != c.stored || c.low != c.stored:
		first = min(c.low, n)
	}
	levels := c.levels
	c.levels = nil // until this Store succeeds
	dirty := c.dirty
	children := c.chunks
	for k := 0; ; k++ {
		count := (len(children) + IndexFanout - 1) / IndexFanout
		if k == len(levels) {
			levels = append(levels, nil)
			first = 0
		}
		level := levels[k]
		if len(level) > count {
			clear(level[count:])
			level = level[:count]
		}
		level = append(level, make([]cas.Ref, count-len(level))...)
		if first >= 0 {
			first /= IndexFanout
			for j := first; j < count; j++ {
				dirty[j] = struct{}{}
			}
		}
		next := make(map[int]struct{}, len(dirty))
		for _, j := range slices.Sorted(maps.Keys(dirty)) {
			if j >= count {
				continue
			}
			b, err := EncodeIndex(uint8(k+1), children[j*IndexFanout:min(len(children), (j+1)*IndexFanout)])
			if err != nil {
				return nil, cas.Ref{}, 0, err
			}
			ref, err := p.Put(ctx, b)
			if err != nil {
				return nil, cas.Ref{}, 0, fmt.Errorf("manifest: store index node: %w", err)
			}
			level[j] = ref
			next[j/IndexFanout] = struct{}{}
		}
		levels[k] = level
		if count == 1 {
			levels = levels[:k+1]
			break
		}
		children, dirty = level, next
	}
	c.reset(levels)
	return nil, levels[len(levels)-1][0], uint8(len(levels)), nil
}

// reset records the current chunks as stored, in the given index levels.
func (c *ChunkList) reset(levels [][]cas.Ref) {
	c.levels = levels
	c.stored, c.low = len(c.chunks), len(c.chunks)
	c.dirty = map[int]struct{}{}
}
