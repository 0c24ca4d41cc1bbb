package fusefs

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// chunkCache keeps recently read chunks in their plain form, so that a
// reader going through a chunk in kernel-sized pieces decompresses and
// verifies it once. Chunks are immutable, so entries never go stale.
//
// Its buffers are recycled: a chunk is decoded into the buffer of one
// evicted before (cas.GetManyInto), so that streaming a file through the
// cache allocates nothing once the cache is full. A fresh daemon's heap
// otherwise grew by some 70 MB over a cold read of 1 GiB, one page fault
// per 4 KiB, which on a PVM guest cost about a third of the read. A
// reader pins the entry it reads (get) until it has copied what it needs
// (release); an evicted entry's buffer is reused only once no reader
// holds it.
type chunkCache struct {
	store cas.Getter
	max   int // entries

	mu      sync.Mutex
	order   *list.List              // of cas.Ref, most recent first; GUARDED_BY(mu)
	items   map[cas.Ref]*cacheEntry // GUARDED_BY(mu)
	loading map[cas.Ref]*load       // GUARDED_BY(mu); fetches in flight
	free    [][]byte                // GUARDED_BY(mu); buffers to decode into, cap manifest.ChunkSize
	slab    []byte                  // GUARDED_BY(mu); room for buffers not handed out yet (newSlab)
	slabbed bool                    // GUARDED_BY(mu); the slab was made

	// queue holds the read-ahead refs not yet fetched, oldest first, at
	// most maxQueued; queued is the same as a set. fetchers is how many
	// goroutines work through the queue, at most maxAhead.
	queue    []cas.Ref            // GUARDED_BY(mu)
	queued   map[cas.Ref]struct{} // GUARDED_BY(mu)
	fetchers int                  // GUARDED_BY(mu)
}

// cacheEntry is a cached chunk. Its data is not modified and its buffer
// not reused while pins > 0 or it is in the cache (elem set).
type cacheEntry struct {
	data []byte
	// buf is the cache's buffer data lies in (takeBufs), whole: it is
	// reused once the entry is dropped. data may be shorter in length and
	// capacity (a compressed chunk is decoded into buf[:0:size]). Nil for
	// a chunk in memory of the store's (a remote fetch's).
	buf  []byte
	elem *list.Element // GUARDED_BY(chunkCache.mu); nil once evicted
	pins int           // GUARDED_BY(chunkCache.mu)
}

// load is one fetch in flight; waiters block on done. remote is closed
// once the fetch turned out to need a remote: a waiter under
// cas.LocalOnly stops waiting then. The fetch's entry is pinned once for
// every waiter still waiting when it ends (waiters), and once for the
// caller that fetches, if it reads (get).
type load struct {
	done    chan struct{}
	remote  chan struct{}
	data    []byte
	err     error
	buf     []byte      // the buffer data lies in, if the fetch took it (takeBufs)
	waiters int         // GUARDED_BY(chunkCache.mu)
	reader  bool        // the fetching caller reads the chunk: it takes a pin
	ended   bool        // GUARDED_BY(chunkCache.mu)
	entry   *cacheEntry // set by finish when the chunk is cached
}

// remoteChunk is a chunk that a read under cas.LocalOnly found only a
// remote could give: the caller fetches it with no lock held and reads
// again (Session.Read).
type remoteChunk struct {
	ref cas.Ref
	err error
}

func (e *remoteChunk) Error() string { return fmt.Sprintf("chunk %s: %v", e.ref.Short(), e.err) }
func (e *remoteChunk) Unwrap() error { return e.err }

// readAheadChunks is how many chunks past a sequential read are fetched in
// the background (one kernel request's worth: MaxWrite), and maxAhead how
// many fetchers work through them at once: two per core, so that one
// fetch's wait for the disk overlaps another's hashing. maxQueued bounds
// the refs waiting for a fetcher: two requests and their read-ahead.
const (
	readAheadChunks = 16
	maxQueued       = 4 * readAheadChunks
)

var maxAhead = max(4, 2*runtime.GOMAXPROCS(0))

// maxFree bounds the buffers kept for reuse beyond the cache's own: a
// request's chunks and their read-ahead.
const maxFree = 2 * readAheadChunks

func newChunkCache(store cas.Getter, maxEntries int) *chunkCache {
	return &chunkCache{
		store:   store,
		max:     maxEntries,
		order:   list.New(),
		items:   make(map[cas.Ref]*cacheEntry),
		loading: make(map[cas.Ref]*load),
		queued:  make(map[cas.Ref]struct{}),
	}
}

// prefetch queues refs to be fetched into the cache in the background, as
// far as the queue has room, and starts fetchers for them; errors are left
// for the real read to report. Every queued ref is fetched, so a request's
// chunks are verified on every core, whatever the order the reader takes
// them in: a ref the reader reached first is in the cache or in flight
// when a fetcher comes to it, and skipped.
func (c *chunkCache) prefetch(refs []cas.Ref) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, ref := range refs {
		if len(c.queue) >= maxQueued {
			break
		}
		if c.known(ref) {
			continue
		}
		c.queue = append(c.queue, ref)
		c.queued[ref] = struct{}{}
	}
	for c.fetchers < maxAhead && c.fetchers < len(c.queue) {
		c.fetchers++
		go c.fetch()
	}
}

// known reports whether ref is cached, in flight or queued. Called with
// c.mu held.
func (c *chunkCache) known(ref cas.Ref) bool {
	_, cached := c.items[ref]
	_, inflight := c.loading[ref]
	_, queued := c.queued[ref]
	return cached || inflight || queued
}

// fetch works through the queue until it is empty, two chunks at a time:
// the store verifies them together (cas.GetMany).
func (c *chunkCache) fetch() {
	for {
		refs, loads := c.claim(2)
		if len(refs) == 0 {
			return
		}
		c.load(context.Background(), refs, loads)
	}
}

// claim takes up to n refs off the queue that are neither cached nor in
// flight, and puts them in flight. When the queue has none, the calling
// fetcher is done.
func (c *chunkCache) claim(n int) ([]cas.Ref, []*load) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var (
		refs  []cas.Ref
		loads []*load
	)
	for len(refs) < n && len(c.queue) > 0 {
		ref := c.queue[0]
		c.queue = c.queue[1:]
		delete(c.queued, ref)
		_, cached := c.items[ref]
		_, inflight := c.loading[ref]
		if cached || inflight {
			continue
		}
		l := newLoad()
		c.loading[ref] = l
		refs, loads = append(refs, ref), append(loads, l)
	}
	if len(refs) == 0 {
		c.fetchers--
	}
	return refs, loads
}

// load fetches refs into loads and the cache. The store is asked for its
// local copies first, decoded into buffers of the cache's, and those are
// cached at once; unless ctx is cas.LocalOnly, the chunks only a remote
// has are then fetched one by one, their waiters under cas.LocalOnly told
// first (l.remote).
func (c *chunkCache) load(ctx context.Context, refs []cas.Ref, loads []*load) {
	bufs := c.takeBufs(len(refs))
	data, errs := cas.GetManyInto(cas.LocalOnly(ctx), c.store, refs, bufs)
	var remote []int
	for i, l := range loads {
		if backs(bufs[i], data[i]) && errs[i] == nil {
			l.buf = bufs[i]
		} else {
			c.recycle(bufs[i])
		}
		if errors.Is(errs[i], cas.ErrNotLocal) && !cas.IsLocalOnly(ctx) {
			close(l.remote)
			remote = append(remote, i)
			continue
		}
		l.data, l.err = data[i], errs[i]
		c.finish(refs[i], l)
	}
	for _, i := range remote {
		loads[i].data, loads[i].err = c.store.Get(ctx, refs[i])
		c.finish(refs[i], loads[i])
	}
}

// backs reports whether data lies in buf's array.
func backs(buf, data []byte) bool {
	return cap(buf) > 0 && cap(data) > 0 && &buf[:1][0] == &data[:1][0]
}

// takeBufs returns n buffers to decode chunks into: recycled ones, then
// new ones.
func (c *chunkCache) takeBufs(n int) [][]byte {
	bufs := make([][]byte, n)
	c.mu.Lock()
	for i := range bufs {
		if k := len(c.free); k > 0 {
			bufs[i], c.free = c.free[k-1], c.free[:k-1]
			continue
		}
		if !c.slabbed {
			c.slabbed = true
			c.slab = newSlab((c.max + maxFree) * manifest.ChunkSize)
		}
		if len(c.slab) >= manifest.ChunkSize {
			bufs[i] = c.slab[:manifest.ChunkSize:manifest.ChunkSize]
			c.slab = c.slab[manifest.ChunkSize:]
		}
	}
	c.mu.Unlock()
	for i, b := range bufs {
		if b == nil {
			bufs[i] = make([]byte, manifest.ChunkSize)
		}
	}
	return bufs
}

// newSlab returns n bytes for the cache's buffers, asking the kernel to
// back them with huge pages: a fault then brings in 2 MiB, where on a PVM
// guest each 4 KiB page of a cache filling up cost a fault of 35-45 us
// (4,100 of them as a freshly started daemon's cache filled). Where the
// host allows no huge pages the advice does nothing. The buffers live as
// long as the cache; the slab is freed with the last of them.
func newSlab(n int) []byte {
	slab := make([]byte, n)
	const huge = 2 << 20
	start := uintptr(unsafe.Pointer(unsafe.SliceData(slab)))
	lo := int((start+huge-1)&^(huge-1) - start)
	hi := int((start+uintptr(n))&^(huge-1) - start)
	if lo < hi {
		_ = unix.Madvise(slab[lo:hi], unix.MADV_HUGEPAGE)
	}
	return slab
}

// recycle keeps b for a later decode, if it is a chunk buffer and the
// free list has room.
func (c *chunkCache) recycle(b []byte) {
	if cap(b) != manifest.ChunkSize {
		return
	}
	c.mu.Lock()
	c.recycleLocked(b)
	c.mu.Unlock()
}

// Called with c.mu held.
func (c *chunkCache) recycleLocked(b []byte) {
	if cap(b) == manifest.ChunkSize && len(c.free) < maxFree {
		c.free = append(c.free, b[:0])
	}
}

func newLoad() *load { return &load{done: make(chan struct{}), remote: make(chan struct{})} }

// get returns the plain bytes of ref, pinned: they stay as they are until
// the caller passes e to release, which it must (e may be nil). Callers
// must not modify them. A fetch already in flight for ref (a read-ahead)
// is joined, not repeated. Under cas.LocalOnly, a chunk that only a
// remote has is a *remoteChunk (wrapping cas.ErrNotLocal), and so is one
// whose fetch in flight waits for a remote.
func (c *chunkCache) get(ctx context.Context, ref cas.Ref) (data []byte, e *cacheEntry, err error) {
	local := cas.IsLocalOnly(ctx)
	for {
		c.mu.Lock()
		if e, ok := c.items[ref]; ok {
			c.order.MoveToFront(e.elem)
			e.pins++
			c.mu.Unlock()
			return e.data, e, nil
		}
		l, joined := c.loading[ref]
		if joined {
			l.waiters++
		} else {
			l = newLoad()
			l.reader = true
			c.loading[ref] = l
		}
		c.mu.Unlock()
		if !joined {
			c.load(ctx, []cas.Ref{ref}, []*load{l})
		} else if err := l.wait(ctx, local); err != nil {
			c.leave(l)
			if errors.Is(err, cas.ErrNotLocal) {
				return nil, nil, &remoteChunk{ref: ref, err: err}
			}
			return nil, nil, err
		}
		if errors.Is(l.err, cas.ErrNotLocal) {
			if local {
				return nil, nil, &remoteChunk{ref: ref, err: l.err}
			}
			continue // a local-only load: this caller may fetch
		}
		if l.err != nil {
			return nil, nil, l.err
		}
		return l.entry.data, l.entry, nil
	}
}

// leave is a waiter of l giving up: it takes no pin, or gives back the
// one l's end gave it.
func (c *chunkCache) leave(l *load) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !l.ended {
		l.waiters--
	} else if l.entry != nil {
		c.unpinLocked(l.entry)
	}
}

// release unpins e (from get); nil does nothing.
func (c *chunkCache) release(e *cacheEntry) {
	if e == nil {
		return
	}
	c.mu.Lock()
	c.unpinLocked(e)
	c.mu.Unlock()
}

// Called with c.mu held.
func (c *chunkCache) unpinLocked(e *cacheEntry) {
	e.pins--
	if e.pins == 0 && e.elem == nil {
		c.drop(e)
	}
}

// drop lets go of an evicted entry no reader holds: its buffer is reused
// if it is the cache's. A chunk a remote fetch gave is not: the fetch may
// have handed the same bytes to others. Called with c.mu held.
func (c *chunkCache) drop(e *cacheEntry) {
	if e.buf != nil {
		c.recycleLocked(e.buf)
	}
	e.data, e.buf = nil, nil
}

// warm brings ref into the cache (get), unpinned.
func (c *chunkCache) warm(ctx context.Context, ref cas.Ref) error {
	_, e, err := c.get(ctx, ref)
	c.release(e)
	return err
}

// wait waits for l to end; under local, only while it needs no remote,
// else it answers cas.ErrNotLocal.
func (l *load) wait(ctx context.Context, local bool) error {
	remote := l.remote
	if !local {
		remote = nil
	}
	select {
	case <-l.done:
		return nil
	case <-remote:
		return cas.ErrNotLocal
	case <-ctx.Done():
		return ctx.Err()
	}
}

// finish ends l, the fetch of ref: its chunk goes into the cache, pinned
// for its waiters and its reader, and its waiters wake.
func (c *chunkCache) finish(ref cas.Ref, l *load) {
	c.mu.Lock()
	delete(c.loading, ref)
	l.ended = true
	if l.err == nil {
		e, ok := c.items[ref]
		if ok {
			if l.buf != nil {
				c.recycleLocked(l.buf) // not in any entry: no one has it
			}
		} else {
			e = &cacheEntry{data: l.data, buf: l.buf, elem: c.order.PushFront(ref)}
			c.items[ref] = e
		}
		l.data, l.buf = nil, nil
		e.pins += l.waiters
		if l.reader {
			e.pins++
		}
		l.entry = e
		for c.order.Len() > c.max {
			old := c.order.Remove(c.order.Back()).(cas.Ref)
			ev := c.items[old]
			delete(c.items, old)
			ev.elem = nil
			if ev.pins == 0 {
				c.drop(ev)
			}
		}
	}
	c.mu.Unlock()
	close(l.done)
}
