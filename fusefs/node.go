package fusefs

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"syscall"

	"homefs/cas"
	"homefs/manifest"
)

// node is one inode of a live session tree, shared by every mount of the
// session. Its identity (ino) lasts as long as the node: a rename keeps it,
// a restore replaces every node with new ones.
//
// Locking: structure (children, parent, parents, nlink) is guarded by
// Session.treeMu; attributes and file content by node.mu. Order:
// Session.freeze < Session.treeMu < node.mu < Session.dirtyMu.
type node struct {
	ino  uint64
	kind manifest.Kind
	sess *Session

	// GUARDED_BY(sess.treeMu)
	parent   *node            // directories: the directory holding it; nil for the root or once removed
	parents  map[*node]int    // files and symlinks: directories holding names for it, with counts
	children map[string]*node // directories: nil until loaded from tree
	subdirs  int              // directories: how many children are directories
	tree     cas.Ref          // directories: tree node as last stored (stale while the directory is dirty)
	nlink    uint32           // files and symlinks: names pointing at the node
	linkID   uint64           // files: hard-link identity once linked twice

	mu     sync.Mutex // guards everything below
	mode   uint32     // permission bits (07777)
	uid    uint32
	gid    uint32
	mtime  int64 // nanoseconds
	ctime  int64 // nanoseconds
	atime  int64 // nanoseconds
	xattrs map[string][]byte
	target string    // symlinks
	data   *fileData // files

	// jpath is the file's path in the durable head as of jepoch (see
	// journalFsync). GUARDED_BY(sess.treeMu)
	jpath  string
	jepoch uint64
}

func (n *node) isDir() bool { return n.kind == manifest.KindDir }

// fileData is the content of a regular file: the stored chunks plus the
// chunks written since they were stored. GUARDED_BY(node.mu).
type fileData struct {
	size int64
	// base is the stored content (Chunks / Index / Depth of the entry) as
	// of the last flush; chunks is loaded from it on first use.
	base   manifest.Entry
	chunks *manifest.ChunkList
	// dirty holds chunks written since the last flush, by chunk index. A
	// buffer may be shorter than the chunk: the rest is zero.
	dirty      map[int][]byte
	dirtyBytes int64
	// readNext is the chunk after the last read: a read starting there is
	// sequential and triggers read-ahead.
	readNext int
	// unjournaled are the byte ranges written since the file was last made
	// durable (by a flush or through the journal).
	unjournaled []span
}

// addDirty accounts for delta bytes of write buffers, in the file and in
// the session. Called with n.mu held.
func (n *node) addDirty(delta int64) {
	n.data.dirtyBytes += delta
	n.sess.dirtyBytes.Add(delta)
}

// loadChunks makes sure n.data.chunks is loaded. Called with n.mu held.
func (n *node) loadChunks(ctx context.Context) error {
	d := n.data
	if d.chunks != nil {
		return nil
	}
	cl, err := manifest.LoadChunkList(ctx, n.sess.store, &d.base)
	if err != nil {
		return fmt.Errorf("load chunk list of inode %d: %w", n.ino, err)
	}
	d.chunks = cl
	return nil
}

// chunkLen is the logical length of chunk i of a file of the given size.
func chunkLen(size int64, i int) int {
	start := int64(i) * manifest.ChunkSize
	if size <= start {
		return 0
	}
	return int(min(size-start, manifest.ChunkSize))
}

// chunkBytes returns the current content of chunk i, at most its logical
// length; shorter means zeros follow. The slice must not be modified.
// Called with n.mu held.
func (n *node) chunkBytes(ctx context.Context, i int) ([]byte, error) {
	d := n.data
	if b, ok := d.dirty[i]; ok {
		return b, nil
	}
	if err := n.loadChunks(ctx); err != nil {
		return nil, err
	}
	if i >= d.chunks.Len() {
		return nil, nil
	}
	ref := d.chunks.At(i)
	if ref.IsZero() {
		return nil, nil
	}
	b, ok := n.sess.pending.get(ref)
	if !ok {
		var err error
		if b, err = n.sess.chunks.get(ctx, ref); err != nil {
			return nil, err
		}
	}
	if l := chunkLen(d.size, i); len(b) > l {
		b = b[:l]
	}
	return b, nil
}

// readAt copies file content at off into dest. Called with n.mu held.
func (n *node) readAt(ctx context.Context, dest []byte, off int64) (int, error) {
	d := n.data
	if off >= d.size {
		return 0, nil
	}
	end := min(off+int64(len(dest)), d.size)
	total := int(end - off)
	for pos := off; pos < end; {
		i := int(pos / manifest.ChunkSize)
		within := int(pos - int64(i)*manifest.ChunkSize)
		span := min(int(end-pos), manifest.ChunkSize-within)
		b, err := n.chunkBytes(ctx, i)
		if err != nil {
			return 0, err
		}
		out := dest[pos-off : pos-off+int64(span)]
		copied := 0
		if within < len(b) {
			copied = copy(out, b[within:])
		}
		clear(out[copied:])
		pos += int64(span)
	}
	first, last := int(off/manifest.ChunkSize), int((end-1)/manifest.ChunkSize)
	if first == d.readNext || first == d.readNext-1 {
		n.readAhead(last + 1)
	}
	d.readNext = last + 1
	return total, nil
}

// readAhead starts fetching the stored chunks after from. Called with n.mu
// held.
func (n *node) readAhead(from int) {
	d := n.data
	if d.chunks == nil {
		return
	}
	var refs []cas.Ref
	for i := from; i < from+readAheadChunks && i < d.chunks.Len(); i++ {
		if _, dirty := d.dirty[i]; dirty {
			continue
		}
		if ref := d.chunks.At(i); !ref.IsZero() {
			refs = append(refs, ref)
		}
	}
	if len(refs) > 0 {
		n.sess.chunks.prefetch(refs)
	}
}

// writableChunk returns the dirty buffer of chunk i with length at least
// minLen, creating it from the stored chunk if needed. Called with n.mu held.
func (n *node) writableChunk(ctx context.Context, i, minLen int) ([]byte, error) {
	d := n.data
	b, ok := d.dirty[i]
	if !ok {
		stored, err := n.chunkBytes(ctx, i)
		if err != nil {
			return nil, err
		}
		b = make([]byte, len(stored), max(len(stored), minLen))
		copy(b, stored)
		if d.dirty == nil {
			d.dirty = make(map[int][]byte)
		}
		n.addDirty(int64(cap(b)))
	}
	if len(b) < minLen {
		if cap(b) < minLen {
			grown := make([]byte, minLen, growCap(cap(b), minLen))
			copy(grown, b)
			n.addDirty(int64(cap(grown) - cap(b)))
			b = grown
		} else {
			old := len(b)
			b = b[:minLen]
			clear(b[old:])
		}
	}
	d.dirty[i] = b
	return b, nil
}

func growCap(have, need int) int {
	c := max(have*2, need, 4096)
	return min(c, manifest.ChunkSize)
}

// writeAt writes data at off, growing the file as needed. Called with n.mu
// held.
func (n *node) writeAt(ctx context.Context, data []byte, off int64) error {
	if off < 0 {
		return syscall.EINVAL
	}
	if off+int64(len(data)) > maxFileSize {
		return syscall.EFBIG
	}
	d := n.data
	for pos := 0; pos < len(data); {
		abs := off + int64(pos)
		i := int(abs / manifest.ChunkSize)
		within := int(abs - int64(i)*manifest.ChunkSize)
		span := min(len(data)-pos, manifest.ChunkSize-within)
		b, err := n.writableChunk(ctx, i, within+span)
		if err != nil {
			return err
		}
		copy(b[within:], data[pos:pos+span])
		pos += span
	}
	if end := off + int64(len(data)); end > d.size {
		n.growTo(end)
	}
	return nil
}

// growTo raises the size; new bytes read as zero. Called with n.mu held.
func (n *node) growTo(size int64) {
	d := n.data
	// A partial last chunk that is stored (not dirty) keeps its length and
	// reads as zero-padded, so growing needs no copy.
	d.size = size
}

// truncate sets the size. Called with n.mu held.
func (n *node) truncate(ctx context.Context, size int64) error {
	if size < 0 {
		return syscall.EINVAL
	}
	if size > maxFileSize {
		return syscall.EFBIG
	}
	d := n.data
	if size >= d.size {
		n.growTo(size)
		return nil
	}
	if err := n.loadChunks(ctx); err != nil {
		return err
	}
	keep := manifest.ChunkCount(size)
	// Cut the last kept chunk to its new length so that growing later
	// reads zeros, not the old bytes.
	if tail := int(size % manifest.ChunkSize); tail != 0 {
		last := keep - 1
		b, err := n.writableChunk(ctx, last, 0)
		if err != nil {
			return err
		}
		if len(b) > tail {
			d.dirty[last] = b[:tail]
		}
	}
	for i, b := range d.dirty {
		if i >= keep {
			n.addDirty(-int64(cap(b)))
			delete(d.dirty, i)
		}
	}
	if d.chunks.Len() > keep {
		d.chunks.Truncate(keep)
	}
	d.size = size
	return nil
}

// punchHole zeroes [off, off+length) without changing the size. Whole
// chunks become holes; partial ones are zeroed in place.
func (n *node) punchHole(ctx context.Context, off, length int64) error {
	d := n.data
	end := min(off+length, d.size)
	if off >= end {
		return nil
	}
	if err := n.loadChunks(ctx); err != nil {
		return err
	}
	for pos := off; pos < end; {
		i := int(pos / manifest.ChunkSize)
		within := int(pos - int64(i)*manifest.ChunkSize)
		span := min(int(end-pos), manifest.ChunkSize-within)
		if within == 0 && (span == manifest.ChunkSize || pos+int64(span) == d.size) {
			if b, ok := d.dirty[i]; ok {
				n.addDirty(-int64(cap(b)))
				delete(d.dirty, i)
			}
			if i < d.chunks.Len() {
				d.chunks.Set(i, cas.Ref{})
			}
		} else {
			b, err := n.writableChunk(ctx, i, 0)
			if err != nil {
				return err
			}
			if within < len(b) {
				clear(b[within:min(len(b), within+span)])
			}
		}
		pos += int64(span)
	}
	return nil
}

// spill moves the dirty chunks of n, but the one at index keep (the one a
// sequential writer is filling; -1 for none), into the store (not
// durably), keeping the file's logical content. Called with n.mu held.
func (n *node) spill(ctx context.Context, b cas.Batch, keep int) error {
	d := n.data
	if len(d.dirty) == 0 {
		return nil
	}
	if err := n.loadChunks(ctx); err != nil {
		return err
	}
	type job struct {
		i   int
		buf []byte
		ref cas.Ref
		err error
	}
	var jobs []*job
	for i, buf := range d.dirty {
		if i == keep {
			continue
		}
		if chunkLen(d.size, i) == 0 {
			n.addDirty(-int64(cap(buf)))
			delete(d.dirty, i)
			continue
		}
		jobs = append(jobs, &job{i: i, buf: buf})
	}
	// Hashing and compressing dominate a spill; the batch takes puts from
	// several goroutines, so use every core.
	work := make(chan *job)
	var wg sync.WaitGroup
	for w := 0; w < min(len(jobs), runtime.GOMAXPROCS(0)); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range work {
				j.ref, j.err = putChunk(b, j.buf, chunkLen(d.size, j.i))
			}
		}()
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	for _, j := range jobs {
		if j.err != nil {
			return j.err
		}
		d.chunks.Set(j.i, j.ref)
		n.addDirty(-int64(cap(j.buf)))
		delete(d.dirty, j.i)
	}
	return nil
}

// putChunk stores buf zero-extended (or cut) to length l; an all-zero
// chunk becomes a hole (the zero ref) and is not stored.
func putChunk(b cas.Batch, buf []byte, l int) (cas.Ref, error) {
	if len(buf) > l {
		buf = buf[:l]
	}
	if isZero(buf) {
		return cas.Ref{}, nil
	}
	if len(buf) < l {
		padded := make([]byte, l)
		copy(padded, buf)
		buf = padded
	}
	return b.Put(buf)
}

func isZero(b []byte) bool {
	for len(b) >= 8 {
		if b[0]|b[1]|b[2]|b[3]|b[4]|b[5]|b[6]|b[7] != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// maxFileSize bounds a file. A live file keeps its chunk list in memory
// (32 bytes per 64 KiB chunk, holes included), so a write or truncate far
// past the end must not make the daemon allocate without bound: 64 GiB is
// 32 MiB of refs, and far beyond what an agent home holds.
const maxFileSize = 64 << 30
