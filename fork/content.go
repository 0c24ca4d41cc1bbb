package fork

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Content reads a stored file one chunk at a time: it holds at most one
// chunk in memory, and a hole (zero ref) reads as zeros without a fetch.
type Content struct {
	ctx  context.Context
	g    cas.Getter
	list *manifest.ChunkList
	size int64
	name string

	off int64  // next byte Read returns
	cur int    // index of buf's chunk, -1 if none
	buf []byte // plain bytes of chunk cur
}

// OpenContent prepares to read file entry e (its chunk list is loaded:
// 32 bytes per 64 KiB chunk, never the data).
func OpenContent(ctx context.Context, g cas.Getter, e *manifest.Entry) (*Content, error) {
	list, err := manifest.LoadChunkList(ctx, g, e)
	if err != nil {
		return nil, err
	}
	return &Content{ctx: ctx, g: g, list: list, size: e.Size, name: e.Name, cur: -1}, nil
}

// Size is the file's length in bytes.
func (c *Content) Size() int64 { return c.size }

// chunkLen is the length of chunk i of the file.
func (c *Content) chunkLen(i int) int {
	return int(min(int64(manifest.ChunkSize), c.size-int64(i)*manifest.ChunkSize))
}

// Chunk returns the plain bytes of chunk i (zeros for a hole). The slice
// is valid until the next call.
func (c *Content) Chunk(i int) ([]byte, error) {
	if i == c.cur {
		return c.buf, nil
	}
	if i < 0 || i >= c.list.Len() {
		return nil, fmt.Errorf("fork: %s: chunk %d of %d", c.name, i, c.list.Len())
	}
	n := c.chunkLen(i)
	ref := c.list.At(i)
	if ref.IsZero() {
		if cap(c.buf) < n {
			c.buf = make([]byte, n)
		}
		c.buf = c.buf[:n]
		clear(c.buf)
	} else {
		b, err := c.g.Get(c.ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("fork: %s: chunk %d: %w", c.name, i, err)
		}
		if len(b) != n {
			return nil, fmt.Errorf("fork: %s: chunk %d has %d bytes, want %d: %w", c.name, i, len(b), n, cas.ErrCorrupt)
		}
		c.buf = b
	}
	c.cur = i
	return c.buf, nil
}

// Read implements io.Reader.
func (c *Content) Read(p []byte) (int, error) {
	if c.off >= c.size {
		return 0, io.EOF
	}
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	i := int(c.off / manifest.ChunkSize)
	b, err := c.Chunk(i)
	if err != nil {
		return 0, err
	}
	n := copy(p, b[c.off-int64(i)*manifest.ChunkSize:])
	c.off += int64(n)
	return n, nil
}

// sameContent reports whether two file entries name the same chunks: then
// their bytes are equal without reading any.
func sameContent(a, b *manifest.Entry) bool {
	if a.Size != b.Size || a.Depth != b.Depth || a.Index != b.Index || len(a.Chunks) != len(b.Chunks) {
		return false
	}
	for i := range a.Chunks {
		if a.Chunks[i] != b.Chunks[i] {
			return false
		}
	}
	return true
}

// isPrefix reports whether the bytes of file a are a prefix of those of
// file b. Full chunks are compared by ref (equal refs, equal bytes; two
// different non-zero refs of full chunks, different bytes); bytes are read
// only for the edge chunk where a ends inside a chunk, and where a hole
// meets stored data.
func isPrefix(ctx context.Context, g cas.Getter, a, b *manifest.Entry) (bool, error) {
	if a.Size > b.Size {
		return false, nil
	}
	if a.Size == 0 {
		return true, nil
	}
	if sameContent(a, b) {
		return true, nil
	}
	ca, err := OpenContent(ctx, g, a)
	if err != nil {
		return false, err
	}
	cb, err := OpenContent(ctx, g, b)
	if err != nil {
		return false, err
	}
	full := int(a.Size / manifest.ChunkSize)
	for i := 0; i < full; i++ {
		ra, rb := ca.list.At(i), cb.list.At(i)
		if ra == rb {
			continue
		}
		if !ra.IsZero() && !rb.IsZero() {
			return false, nil
		}
		eq, err := chunkPrefix(ca, cb, i, manifest.ChunkSize)
		if err != nil || !eq {
			return false, err
		}
	}
	if edge := int(a.Size % manifest.ChunkSize); edge != 0 {
		if a.Size == b.Size && ca.list.At(full) == cb.list.At(full) {
			return true, nil
		}
		return chunkPrefix(ca, cb, full, edge)
	}
	return true, nil
}

// chunkPrefix compares the first n bytes of chunk i of a and b.
func chunkPrefix(a, b *Content, i, n int) (bool, error) {
	ba, err := a.Chunk(i)
	if err != nil {
		return false, err
	}
	bb, err := b.Chunk(i)
	if err != nil {
		return false, err
	}
	return len(bb) >= n && len(ba) >= n && bytes.Equal(ba[:n], bb[:n]), nil
}
