package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// node is one inode of a live session tree, shared by every mount of the
// session. Its identity (ino) lasts as long as the node: a rename keeps it,
// a restore replaces every node with new ones.
//
// Locking: structure (children, parent, parents, nlink) is guarded by
// Session.treeMu; attributes and file content by node.mu (the lock order
// is in doc.go).
type node struct {
	ino  uint64
	kind manifest.Kind
	sess *Session

	// GUARDED_BY(sess.treeMu)
	parent   *node            // directories: the directory holding it; nil for the root or once removed
	parents  map[*node]int    // non-directories: directories holding names for it, with counts
	children map[string]*node // directories: nil until loaded from tree
	subdirs  int              // directories: how many children are directories
	tree     cas.Ref          // directories: tree node as last stored (stale while the directory is dirty)
	nlink    uint32           // non-directories: names pointing at the node
	linkID   uint64           // non-directories: hard-link identity once linked twice
	// linkable marks a file made by O_TMPFILE without O_EXCL that never
	// had a name: Link may give it its first one (nlink 0 otherwise means
	// unlinked, for good).
	linkable bool

	mu     sync.Mutex // guards everything below
	mode   uint32     // permission bits (07777)
	uid    uint32
	gid    uint32
	mtime  int64 // nanoseconds
	ctime  int64 // nanoseconds
	atime  int64 // nanoseconds
	btime  int64 // birth time, nanoseconds; 0 when unknown (a tree from before it was kept)
	xattrs map[string][]byte
	target string    // symlinks
	rdev   uint32    // device nodes: the device number (fixed at creation)
	data   *fileData // files
	// cgen is the generation of a file's content: 0 once it changed, until
	// an open hands out a fresh one (contentGen). A mount's kernel keeps
	// its cached pages across opens only while the generation they were
	// read at is still current (fnode.cacheGen).
	cgen uint64

	// jid is the node's journal id in the journal's incarnation jinc
	// (jops.go). GUARDED_BY(sess.treeMu)
	jid, jinc uint64
	// aver orders the records of the node's attributes (attrRecord).
	// GUARDED_BY(mu)
	aver uint64
}

func (n *node) isDir() bool { return n.kind == manifest.KindDir }

// contentGens hands out content generations, unique in the process, so
// that a node a restore or a pull put in another's place never shows a
// generation the old one had.
var contentGens atomic.Uint64

// contentGen returns the current generation of n's content. Called with
// n.mu held.
func (n *node) contentGen() uint64 {
	if n.cgen == 0 {
		n.cgen = contentGens.Add(1)
	}
	return n.cgen
}

// changed records that n's content changed: no page a kernel cached of it
// before is kept. Called with n.mu held.
func (n *node) changed() { n.cgen = 0 }

// fileData is the content of a regular file: the stored chunks plus the
// chunks written since they were stored. GUARDED_BY(node.mu).
type fileData struct {
	size int64
	// base is the stored content (Chunks / Index / Depth of the entry) as
	// of the last flush; chunks is loaded from it on first use.
	base   manifest.Entry
	chunks *manifest.ChunkList
	// indexBlocks is st_blocks of base's chunks, counted once while
	// chunks is not loaded and base has an index (chunkBlocks);
	// indexCounted says it was.
	indexBlocks  int64
	indexCounted bool
	// dirty holds chunks written since the last flush, by chunk index.
	dirty map[int]*dirtyChunk
	// dirtyBytes and overlayBytes are the memory of dirty's whole buffers
	// and of its overlays.
	dirtyBytes, overlayBytes int64
	// readNext is the chunk after the last read: a read starting there is
	// sequential and triggers read-ahead.
	readNext int
	// unjournaled are the byte ranges written since the file was last made
	// durable (by a flush or through the journal).
	unjournaled []span
	// backing is the local file passthrough opens use (passthrough.go);
	// nil without one.
	backing *backing
}

// charge accounts for delta bytes of c's buffers, in the file (whole
// buffers and overlays apart) and in the session. Called with n.mu held.
func (n *node) charge(c *dirtyChunk, delta int64) {
	if c.whole {
		n.data.dirtyBytes += delta
	} else {
		n.data.overlayBytes += delta
	}
	n.sess.dirtyBytes.Add(delta)
	n.sess.buffers.total.Add(delta)
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

// chunkLen is the logical length of chunk i of a file of the given size,
// which is what a stored chunk holds (manifest.ChunkLen).
func chunkLen(size int64, i int) int { return manifest.ChunkLen(size, i) }

// dirtyChunk is a chunk written since the last flush. Most are whole: buf
// is the content, and a buffer shorter than the chunk means zeros follow.
// A small write into a stored chunk starts an overlay instead: the written
// extents over the stored chunk base, which is read only when the chunk is
// read outside the extents or stored. So a 4 KiB write into a clean chunk
// (SQLite's pages) costs 4 KiB, not a 64 KiB read, verify and copy.
type dirtyChunk struct {
	whole bool
	buf   []byte // whole: the content

	base    cas.Ref  // overlay: the stored chunk under ext
	baseLen int      // overlay: base's logical length when the overlay began
	ext     []extent // overlay: written ranges, sorted, neither overlapping nor adjacent
}

// extent is a written range of an overlay.
type extent struct {
	off  int
	data []byte
}

// Past these, an overlay is made whole: the bytes it would hold approach
// the chunk's, and reading it would cost more than a whole buffer.
const (
	overlayMaxBytes   = 16 << 10
	overlayMaxExtents = 16
)

// cost is the memory c holds, as counted against the spill thresholds.
func (c *dirtyChunk) cost() int64 {
	if c.whole {
		return int64(cap(c.buf))
	}
	var k int
	for _, e := range c.ext {
		k += cap(e.data)
	}
	return int64(k)
}

// storedChunk returns the stored content of ref, at most l bytes; shorter
// means zeros follow. The slice must not be modified, and is the caller's
// only until it passes e to n.sess.chunks.release (the cache reuses its
// buffer then).
func (n *node) storedChunk(ctx context.Context, ref cas.Ref, l int) ([]byte, *cacheEntry, error) {
	if ref.IsZero() {
		return nil, nil, nil
	}
	b, ok := n.sess.pending.get(ref)
	var e *cacheEntry
	if !ok {
		var err error
		if b, e, err = n.sess.chunks.get(ctx, ref); err != nil {
			return nil, nil, err
		}
	}
	if len(b) > l {
		b = b[:l]
	}
	return b, e, nil
}

// warmChunk brings stored chunk ref into the chunk cache (or finds it
// pending), so that a later storedChunk under the same lock finds it.
func (n *node) warmChunk(ctx context.Context, ref cas.Ref) error {
	_, e, err := n.storedChunk(ctx, ref, 0)
	n.sess.chunks.release(e)
	return err
}

// storedRef returns the stored ref of chunk i (zero for a hole or past the
// list). Called with n.mu held.
func (n *node) storedRef(ctx context.Context, i int) (cas.Ref, error) {
	d := n.data
	if err := n.loadChunks(ctx); err != nil {
		return cas.Ref{}, err
	}
	if i >= d.chunks.Len() {
		return cas.Ref{}, nil
	}
	return d.chunks.At(i), nil
}

// readChunk copies chunk i's content at within into out (zeros past its
// end), without changing what is buffered. Called with n.mu held.
func (n *node) readChunk(ctx context.Context, i, within int, out []byte) error {
	d := n.data
	if c, ok := d.dirty[i]; ok && !c.whole {
		if e := c.covering(within, len(out)); e != nil {
			copy(out, e.data[within-e.off:])
			return nil
		}
		base, be, err := n.storedChunk(ctx, c.base, c.baseLen)
		if err != nil {
			return err
		}
		copyAt(out, base, within)
		n.sess.chunks.release(be)
		for _, e := range c.ext {
			if lo, hi := max(e.off, within), min(e.off+len(e.data), within+len(out)); lo < hi {
				copy(out[lo-within:hi-within], e.data[lo-e.off:])
			}
		}
		return nil
	}
	b, e, err := n.chunkBytes(ctx, i)
	if err != nil {
		return err
	}
	copyAt(out, b, within)
	n.sess.chunks.release(e)
	return nil
}

// copyAt copies src from offset within into out, zeroing what src lacks.
func copyAt(out, src []byte, within int) {
	k := 0
	if within < len(src) {
		k = copy(out, src[within:])
	}
	clear(out[k:])
}

// covering returns the extent holding all of [off, off+l), if one does.
func (c *dirtyChunk) covering(off, l int) *extent {
	for k := range c.ext {
		e := &c.ext[k]
		if e.off <= off && off+l <= e.off+len(e.data) {
			return e
		}
	}
	return nil
}

// merged returns overlay c's content as a new buffer.
func (n *node) merged(ctx context.Context, c *dirtyChunk) ([]byte, error) {
	base, be, err := n.storedChunk(ctx, c.base, c.baseLen)
	if err != nil {
		return nil, err
	}
	l := len(base)
	for _, e := range c.ext {
		l = max(l, e.off+len(e.data))
	}
	b := make([]byte, l)
	copy(b, base)
	n.sess.chunks.release(be)
	for _, e := range c.ext {
		copy(b[e.off:], e.data)
	}
	return b, nil
}

// addExtent writes p at off of overlay c, merging it with the extents it
// overlaps or touches. Called with n.mu held.
func (n *node) addExtent(c *dirtyChunk, off int, p []byte) {
	lo, hi := off, off+len(p)
	keep := c.ext[:0:0]
	var joined []extent
	for _, e := range c.ext {
		if e.off <= hi && off <= e.off+len(e.data) {
			lo, hi = min(lo, e.off), max(hi, e.off+len(e.data))
			joined = append(joined, e)
		} else {
			keep = append(keep, e)
		}
	}
	data := make([]byte, hi-lo)
	var freed int
	for _, e := range joined {
		copy(data[e.off-lo:], e.data)
		freed += cap(e.data)
	}
	copy(data[off-lo:], p)
	n.charge(c, int64(cap(data)-freed))
	at := len(keep)
	for k, e := range keep {
		if e.off > lo {
			at = k
			break
		}
	}
	c.ext = append(keep[:at:at], append([]extent{{off: lo, data: data}}, keep[at:]...)...)
}

func (c *dirtyChunk) overlayBytes() int {
	var k int
	for _, e := range c.ext {
		k += len(e.data)
	}
	return k
}

// makeWhole turns overlay c into a whole chunk. Called with n.mu held.
func (n *node) makeWhole(ctx context.Context, c *dirtyChunk) error {
	if c.whole {
		return nil
	}
	b, err := n.merged(ctx, c)
	if err != nil {
		return err
	}
	n.charge(c, -c.cost())
	*c = dirtyChunk{whole: true, buf: b}
	n.charge(c, int64(cap(b)))
	return nil
}

// chunkBytes returns the current content of chunk i, at most its logical
// length; shorter means zeros follow. An overlay is made whole first. The
// slice must not be modified. Called with n.mu held.
func (n *node) chunkBytes(ctx context.Context, i int) ([]byte, *cacheEntry, error) {
	d := n.data
	if c, ok := d.dirty[i]; ok {
		if err := n.makeWhole(ctx, c); err != nil {
			return nil, nil, err
		}
		return c.buf, nil, nil
	}
	ref, err := n.storedRef(ctx, i)
	if err != nil {
		return nil, nil, err
	}
	return n.storedChunk(ctx, ref, chunkLen(d.size, i))
}

// readAt copies file content at off into dest. Called with n.mu held.
func (n *node) readAt(ctx context.Context, dest []byte, off int64) (int, error) {
	d := n.data
	if off >= d.size {
		return 0, nil
	}
	end := min(off+int64(len(dest)), d.size)
	total := int(end - off)
	first, last := int(off/manifest.ChunkSize), int((end-1)/manifest.ChunkSize)
	// The request's chunks after its first are fetched in the background
	// while this one reads the first, and past them read-ahead chunks
	// when the reader is sequential: decompression and verification of a
	// kernel-sized request (up to 16 chunks) run on every core.
	to := last + 1
	if first == d.readNext || first == d.readNext-1 {
		to += readAheadChunks
	}
	if err := n.loadChunks(ctx); err != nil {
		return 0, err
	}
	n.readAhead(first+1, to)
	for pos := off; pos < end; {
		i := int(pos / manifest.ChunkSize)
		within := int(pos - int64(i)*manifest.ChunkSize)
		span := min(int(end-pos), manifest.ChunkSize-within)
		if err := n.readChunk(ctx, i, within, dest[pos-off:pos-off+int64(span)]); err != nil {
			return 0, err
		}
		pos += int64(span)
	}
	d.readNext = last + 1
	return total, nil
}

// readAhead starts fetching the stored chunks from up to to. Called with
// n.mu held.
func (n *node) readAhead(from, to int) {
	d := n.data
	if d.chunks == nil || from >= to {
		return
	}
	var refs []cas.Ref
	for i := from; i < to && i < d.chunks.Len(); i++ {
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

// writeChunk writes p at within of chunk i. A write into a stored chunk
// that it does not cover starts or extends an overlay while that stays
// small; otherwise the chunk is whole. Called with n.mu held.
func (n *node) writeChunk(ctx context.Context, i, within int, p []byte) error {
	d := n.data
	c, ok := d.dirty[i]
	if !ok {
		ref, err := n.storedRef(ctx, i)
		if err != nil {
			return err
		}
		l := chunkLen(d.size, i)
		switch {
		case ref.IsZero() || within == 0 && len(p) >= l:
			// Nothing stored to keep: a hole, or overwritten whole.
			c = &dirtyChunk{whole: true}
		case !readsStored(ref, within, len(p), l):
			c = &dirtyChunk{base: ref, baseLen: l}
		default:
			stored, se, err := n.storedChunk(ctx, ref, l)
			if err != nil {
				return err
			}
			c = &dirtyChunk{whole: true, buf: make([]byte, len(stored), max(len(stored), within+len(p)))}
			copy(c.buf, stored)
			n.sess.chunks.release(se)
			n.charge(c, int64(cap(c.buf)))
		}
		if d.dirty == nil {
			d.dirty = make(map[int]*dirtyChunk)
		}
		d.dirty[i] = c
	}
	if !c.whole {
		if c.takes(len(p)) {
			n.addExtent(c, within, p)
			return nil
		}
		if err := n.makeWhole(ctx, c); err != nil {
			return err
		}
	}
	n.extend(c, within+len(p))
	copy(c.buf[within:], p)
	return nil
}

// readsStored reports whether writing l bytes at within of a clean chunk
// of length cl stored as ref reads the stored chunk (writeChunk): one it
// neither covers nor overlays.
func readsStored(ref cas.Ref, within, l, cl int) bool {
	return !ref.IsZero() && (within != 0 || l < cl) && l > overlayMaxBytes
}

// takes reports whether overlay c takes l more bytes as an extent.
func (c *dirtyChunk) takes(l int) bool {
	return c.overlayBytes()+l <= overlayMaxBytes && len(c.ext) < overlayMaxExtents
}

// writeReady reads what a write of l bytes at off reads of the stored
// content (writeChunk: the chunk list, the stored chunks it keeps in
// part), so that under cas.LocalOnly the write fails with cas.ErrNotLocal
// before it changes anything. Called with n.mu held.
func (n *node) writeReady(ctx context.Context, off int64, l int) error {
	d := n.data
	for pos := 0; pos < l; {
		abs := off + int64(pos)
		i := int(abs / manifest.ChunkSize)
		within := int(abs - int64(i)*manifest.ChunkSize)
		span := min(l-pos, manifest.ChunkSize-within)
		pos += span
		if c, ok := d.dirty[i]; ok {
			if c.whole || c.takes(span) {
				continue
			}
			if err := n.warmChunk(ctx, c.base); err != nil {
				return err
			}
			continue
		}
		ref, err := n.storedRef(ctx, i)
		if err != nil {
			return err
		}
		if cl := chunkLen(d.size, i); readsStored(ref, within, span, cl) {
			if err := n.warmChunk(ctx, ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// writableChunk returns the whole buffer of chunk i, creating it from the
// stored chunk if needed. Called with n.mu held.
func (n *node) writableChunk(ctx context.Context, i int) ([]byte, error) {
	d := n.data
	c, ok := d.dirty[i]
	if !ok {
		stored, se, err := n.chunkBytes(ctx, i)
		if err != nil {
			return nil, err
		}
		c = &dirtyChunk{whole: true, buf: bytes.Clone(stored)}
		n.sess.chunks.release(se)
		if c.buf == nil {
			c.buf = []byte{}
		}
		n.charge(c, int64(cap(c.buf)))
		if d.dirty == nil {
			d.dirty = make(map[int]*dirtyChunk)
		}
		d.dirty[i] = c
	}
	if err := n.makeWhole(ctx, c); err != nil {
		return nil, err
	}
	return c.buf, nil
}

// extend makes whole chunk c's buffer at least minLen long, the new bytes
// zero. Called with n.mu held.
func (n *node) extend(c *dirtyChunk, minLen int) {
	b := c.buf
	if len(b) >= minLen {
		return
	}
	if cap(b) < minLen {
		grown := make([]byte, minLen, growCap(cap(b), minLen))
		copy(grown, b)
		n.charge(c, int64(cap(grown)-cap(b)))
		c.buf = grown
		return
	}
	old := len(b)
	c.buf = b[:minLen]
	clear(c.buf[old:])
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
	n.changed()
	d := n.data
	for pos := 0; pos < len(data); {
		abs := off + int64(pos)
		i := int(abs / manifest.ChunkSize)
		within := int(abs - int64(i)*manifest.ChunkSize)
		span := min(len(data)-pos, manifest.ChunkSize-within)
		if err := n.writeChunk(ctx, i, within, data[pos:pos+span]); err != nil {
			return err
		}
		pos += span
	}
	if end := off + int64(len(data)); end > d.size {
		return n.growTo(ctx, end)
	}
	return nil
}

// growTo raises the size; new bytes read as zero. A stored chunk holds
// exactly its length at the file's size (manifest.ChunkLen), so a short
// last chunk that is stored and clean becomes dirty, an overlay of no
// extents over it: the next flush stores it again, zero-padded to its new
// length, at the cost of one chunk read then and nothing now. The chunks
// past it are holes. Called with n.mu held.
func (n *node) growTo(ctx context.Context, size int64) error {
	d := n.data
	if size <= d.size {
		return nil
	}
	n.changed()
	if last := manifest.ChunkCount(d.size) - 1; last >= 0 && d.size%manifest.ChunkSize != 0 {
		if _, dirty := d.dirty[last]; !dirty {
			ref, err := n.storedRef(ctx, last)
			if err != nil {
				return err
			}
			if !ref.IsZero() {
				if d.dirty == nil {
					d.dirty = make(map[int]*dirtyChunk)
				}
				d.dirty[last] = &dirtyChunk{base: ref, baseLen: chunkLen(d.size, last)}
			}
		}
	}
	d.size = size
	return nil
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
		return n.growTo(ctx, size)
	}
	n.changed()
	if err := n.loadChunks(ctx); err != nil {
		return err
	}
	keep := manifest.ChunkCount(size)
	// Cut the last kept chunk to its new length so that growing later
	// reads zeros, not the old bytes.
	if tail := int(size % manifest.ChunkSize); tail != 0 {
		last := keep - 1
		b, err := n.writableChunk(ctx, last)
		if err != nil {
			return err
		}
		if len(b) > tail {
			d.dirty[last].buf = b[:tail]
		}
	}
	for i, c := range d.dirty {
		if i >= keep {
			n.charge(c, -c.cost())
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
	if cas.IsLocalOnly(ctx) {
		if err := n.zeroReady(ctx, off, end); err != nil {
			return err
		}
	}
	n.changed()
	for pos := off; pos < end; {
		i := int(pos / manifest.ChunkSize)
		within := int(pos - int64(i)*manifest.ChunkSize)
		span := min(int(end-pos), manifest.ChunkSize-within)
		if within == 0 && (span == manifest.ChunkSize || pos+int64(span) == d.size) {
			if c, ok := d.dirty[i]; ok {
				n.charge(c, -c.cost())
				delete(d.dirty, i)
			}
			if i < d.chunks.Len() {
				d.chunks.Set(i, cas.Ref{})
			}
		} else {
			b, err := n.writableChunk(ctx, i)
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

// zeroReady reads what punchHole reads of the stored content to zero
// [off, end): the chunks it zeroes in part (writableChunk), so that under
// cas.LocalOnly it fails with cas.ErrNotLocal before it changes anything.
// Called with n.mu held, its chunks loaded.
func (n *node) zeroReady(ctx context.Context, off, end int64) error {
	d := n.data
	for _, pos := range []int64{off, end - 1} {
		i := int(pos / manifest.ChunkSize)
		start := int64(i) * manifest.ChunkSize
		if off <= start && (start+manifest.ChunkSize <= end || end == d.size) {
			continue // zeroed whole: a hole
		}
		if c, ok := d.dirty[i]; ok {
			if !c.whole {
				if err := n.warmChunk(ctx, c.base); err != nil {
					return err
				}
			}
			continue
		}
		if i < d.chunks.Len() {
			if err := n.warmChunk(ctx, d.chunks.At(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// spill moves the dirty chunks of n, but the one at index keep (the one a
// sequential writer is filling; -1 for none) and, unless overlays, the
// overlays, into the store (not durably), keeping the file's logical
// content. Called with n.mu held.
func (n *node) spill(ctx context.Context, b cas.Batch, keep int, overlays bool) error {
	d := n.data
	if len(d.dirty) == 0 {
		return nil
	}
	if err := n.loadChunks(ctx); err != nil {
		return err
	}
	type job struct {
		i   int
		c   *dirtyChunk
		ref cas.Ref
		err error
	}
	var jobs []*job
	for i, c := range d.dirty {
		if i == keep || !c.whole && !overlays {
			continue
		}
		if chunkLen(d.size, i) == 0 {
			n.charge(c, -c.cost())
			delete(d.dirty, i)
			continue
		}
		jobs = append(jobs, &job{i: i, c: c})
	}
	do := func(j *job) {
		buf := j.c.buf
		if !j.c.whole {
			// Overlays read their base here, on every core.
			if buf, j.err = n.merged(ctx, j.c); j.err != nil {
				return
			}
		}
		j.ref, j.err = putChunk(b, buf, chunkLen(d.size, j.i))
	}
	if len(jobs) == 1 {
		// A small file: handing its one chunk to a goroutine costs a
		// wakeup of another thread, which an untar pays per file (Go's
		// tree over the rings: 2.0-2.5 s handed off, 1.3-1.5 s here).
		do(jobs[0])
	} else {
		// Hashing and compressing dominate a spill; the batch takes puts
		// from several goroutines, so use every core.
		work := make(chan *job)
		var wg sync.WaitGroup
		for w := 0; w < min(len(jobs), runtime.GOMAXPROCS(0)); w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range work {
					do(j)
				}
			}()
		}
		for _, j := range jobs {
			work <- j
		}
		close(work)
		wg.Wait()
	}
	for _, j := range jobs {
		if j.err != nil {
			return j.err
		}
		d.chunks.Set(j.i, j.ref)
		n.charge(j.c, -j.c.cost())
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

// maxFileSize bounds a file (manifest.MaxFileSize says why): a write or
// truncate past it fails with EFBIG.
const maxFileSize = manifest.MaxFileSize
