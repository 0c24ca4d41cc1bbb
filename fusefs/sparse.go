package fusefs

// Holes, st_blocks, SEEK_DATA and SEEK_HOLE: see doc.go, Holes.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

var _ fs.NodeLseeker = (*fnode)(nil)

// blockSize is what st_blocks counts in, as ext4 allocates: a file of
// 100 bytes has 8 blocks of 512 bytes.
const blockSize = 4096

func roundBlock(n int64) int64 { return (n + blockSize - 1) &^ (blockSize - 1) }

// denseBlocks is st_blocks for size bytes with no hole: never less than
// what any file of that size holds.
func denseBlocks(size int64) int64 { return roundBlock(size) / 512 }

// fastSymlinkMax is the longest target ext4 keeps in the inode itself (a
// symlink with no block).
const fastSymlinkMax = 59

// blocks is n's st_blocks (512-byte units) for an attribute reply whose
// size is size. A backed file's content is in its backing file, whose
// blocks only an fstat tells (Session.Getattr asks it); here it counts as
// dense. Called with n.mu held.
func (n *node) blocks(ctx context.Context, size int64) int64 {
	switch n.kind {
	case manifest.KindFile:
		if n.data.backing != nil {
			return denseBlocks(size)
		}
		return n.chunkBlocks(ctx)
	case manifest.KindDir:
		return denseBlocks(size)
	case manifest.KindSymlink:
		if len(n.target) <= fastSymlinkMax {
			return 0
		}
		return denseBlocks(int64(len(n.target)))
	}
	return 0
}

// backedBlocks returns the st_blocks of n's backing file, if n has one,
// and applies the passthrough reads the fstat shows (atime.go).
func (n *node) backedBlocks() (int64, bool) {
	if n.kind != manifest.KindFile {
		return 0, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.data.backing
	if b == nil {
		return 0, false
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(b.f.Fd()), &st); err != nil {
		return 0, false // the dense count stands
	}
	n.sawReads(&st)
	return st.Blocks, true
}

// dirtyLen is how many bytes at the start of dirty chunk i may hold data:
// a whole buffer's length, rounded up to a block (zeros follow it), or an
// overlay's whole chunk. Called with n.mu held.
func (n *node) dirtyLen(i int, c *dirtyChunk) int {
	l := chunkLen(n.data.size, i)
	if c.whole {
		return min(int(roundBlock(int64(len(c.buf)))), l)
	}
	return l
}

// chunkBlocks counts n's chunks that are not holes, each rounded up to
// whole blocks, in 512-byte units. Called with n.mu held.
func (n *node) chunkBlocks(ctx context.Context) int64 {
	d := n.data
	count := manifest.ChunkCount(d.size)
	var sum int64
	stored := func(refs func(int) cas.Ref, k int) {
		for i := range min(k, count) {
			if _, dirty := d.dirty[i]; !dirty && !refs(i).IsZero() {
				sum += roundBlock(int64(chunkLen(d.size, i)))
			}
		}
	}
	switch {
	case d.chunks != nil:
		stored(d.chunks.At, d.chunks.Len())
	case d.base.Depth == 0:
		stored(func(i int) cas.Ref { return d.base.Chunks[i] }, len(d.base.Chunks))
	default:
		// Only the index knows; count it once, without keeping its refs
		// in memory (a du of a tree would otherwise load every list).
		if !d.indexCounted {
			cl, err := manifest.LoadChunkList(ctx, n.sess.store, &d.base)
			if err != nil {
				return denseBlocks(d.size) // a read will report the damage
			}
			stored(cl.At, cl.Len())
			d.indexBlocks, d.indexCounted = sum, true
		}
		sum = d.indexBlocks
	}
	for i, c := range d.dirty {
		if i < count {
			sum += roundBlock(int64(n.dirtyLen(i, c)))
		}
	}
	return sum / 512
}

// Seek answers lseek's SEEK_DATA and SEEK_HOLE for n at off: the first
// offset at or after off that may hold data, or that is in a hole (the end
// of the file counts as one). ENXIO when off is not before the end, or no
// data follows it.
func (s *Session) Seek(ctx context.Context, n *node, off int64, whence int) (int64, error) {
	if whence != unix.SEEK_DATA && whence != unix.SEEK_HOLE {
		return 0, syscall.EINVAL
	}
	if n.kind != manifest.KindFile {
		return 0, syscall.EINVAL
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if b := n.data.backing; b != nil {
		// The backing file holds the content (a passthrough writer may
		// have written it since the last ingest). Nothing reads or writes
		// it at its file offset, which lseek moves.
		k, err := unix.Seek(int(b.f.Fd()), off, whence)
		if err != nil {
			return 0, err
		}
		return k, nil
	}
	return n.seekChunks(ctx, off, whence == unix.SEEK_HOLE)
}

// seekChunks is Seek on n's chunks. Called with n.mu held.
func (n *node) seekChunks(ctx context.Context, off int64, hole bool) (int64, error) {
	d := n.data
	if off < 0 || off >= d.size {
		return 0, syscall.ENXIO
	}
	if err := n.loadChunks(ctx); err != nil {
		return 0, err
	}
	for i := int(off / manifest.ChunkSize); int64(i)*manifest.ChunkSize < d.size; i++ {
		start, l := int64(i)*manifest.ChunkSize, chunkLen(d.size, i)
		k := 0 // the chunk's data: [start, start+k); a hole after it
		if c, ok := d.dirty[i]; ok {
			k = n.dirtyLen(i, c)
		} else if i < d.chunks.Len() && !d.chunks.At(i).IsZero() {
			k = l
		}
		switch {
		case hole && k < l:
			return max(off, start+int64(k)), nil
		case !hole && k > 0 && off < start+int64(k):
			return max(off, start), nil
		}
	}
	if hole {
		return d.size, nil
	}
	return 0, syscall.ENXIO
}

func (f *fnode) Lseek(ctx context.Context, _ fs.FileHandle, off uint64, whence uint32) (uint64, syscall.Errno) {
	k, err := f.sess().Seek(ctx, f.n.Load(), int64(off), int(whence))
	if err != nil {
		return 0, f.m.toErrno("lseek", f, err)
	}
	return uint64(k), 0
}

// isHole reports whether chunk i of n is a hole. Called with n.mu held,
// its chunks loaded.
func (n *node) isHole(i int) bool {
	d := n.data
	_, dirty := d.dirty[i]
	return !dirty && (i >= d.chunks.Len() || d.chunks.At(i).IsZero())
}

// writeOut writes p, n's content at off, into f at off, punching the
// stretches that are holes in n instead of writing their zeros, so that a
// backing file is as sparse as its node; *fsize is f's size, which a hole
// at the end extends by a write of its last byte. Called with n.mu held,
// its chunks loaded.
func (n *node) writeOut(f *os.File, p []byte, off int64, fsize *int64) error {
	for len(p) > 0 {
		i := int(off / manifest.ChunkSize)
		hole := n.isHole(i)
		// The stretch of chunks of one kind that p covers from off.
		k := min(len(p), int(int64(i+1)*manifest.ChunkSize-off))
		for k < len(p) && n.isHole(int((off+int64(k))/manifest.ChunkSize)) == hole {
			k = min(len(p), k+manifest.ChunkSize)
		}
		end := off + int64(k)
		var err error
		switch {
		case !hole:
			_, err = f.WriteAt(p[:k], off)
		case off < *fsize:
			err = punch(f, off, min(end, *fsize))
			if err == nil && end > *fsize {
				_, err = f.WriteAt([]byte{0}, end-1)
			}
		default:
			_, err = f.WriteAt([]byte{0}, end-1)
		}
		if err != nil {
			return fmt.Errorf("copy into backing file: %w", err)
		}
		*fsize = max(*fsize, end)
		p, off = p[k:], end
	}
	return nil
}

// punch makes [off, end) of f a hole, or zeros where f's filesystem cannot
// punch one.
func punch(f *os.File, off, end int64) error {
	err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, end-off)
	if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS) {
		_, err = f.WriteAt(make([]byte, end-off), off)
	}
	return err
}

// putBack makes p the content of n at off, as writeAt does, but a chunk
// of zeros a hole rather than a buffer: an absorbed sparse file stays
// sparse, and its holes cost no memory. Called with n.mu held.
func (n *node) putBack(ctx context.Context, p []byte, off int64) error {
	switch {
	case !isZero(p):
		return n.writeAt(ctx, p, off)
	case off < n.data.size:
		return n.punchHole(ctx, off, int64(len(p)))
	}
	return nil // past the end: a grow makes it zeros
}
