package fusefs

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/homefs/homefs/cas"
)

// chunkCache keeps recently read chunks in their plain form, so that a
// reader going through a chunk in kernel-sized pieces decompresses and
// verifies it once. Chunks are immutable, so entries never go stale.
type chunkCache struct {
	store cas.Getter
	max   int // entries

	mu      sync.Mutex
	order   *list.List // of cas.Ref, most recent first; GUARDED_BY(mu)
	items   map[cas.Ref]cacheItem
	loading map[cas.Ref]*load // GUARDED_BY(mu); fetches in flight

	// queue holds the read-ahead refs not yet fetched, oldest first, at
	// most maxQueued; queued is the same as a set. fetchers is how many
	// goroutines work through the queue, at most maxAhead.
	queue    []cas.Ref            // GUARDED_BY(mu)
	queued   map[cas.Ref]struct{} // GUARDED_BY(mu)
	fetchers int                  // GUARDED_BY(mu)
}

// load is one fetch in flight; waiters block on done. remote is closed
// once the fetch turned out to need a remote: a waiter under
// cas.LocalOnly stops waiting then.
type load struct {
	done   chan struct{}
	remote chan struct{}
	data   []byte
	err    error
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

type cacheItem struct {
	data []byte
	elem *list.Element
}

func newChunkCache(store cas.Getter, maxEntries int) *chunkCache {
	return &chunkCache{
		store:   store,
		max:     maxEntries,
		order:   list.New(),
		items:   make(map[cas.Ref]cacheItem),
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
		c.loadMany(refs, loads)
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

// loadMany is load for several refs at once, with a remote allowed: the
// chunks the local store has are cached at once, then those only a remote
// has are fetched one by one.
func (c *chunkCache) loadMany(refs []cas.Ref, loads []*load) {
	ctx := context.Background()
	data, errs := cas.GetMany(cas.LocalOnly(ctx), c.store, refs)
	var remote []int
	for i, l := range loads {
		if errors.Is(errs[i], cas.ErrNotLocal) {
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

func newLoad() *load { return &load{done: make(chan struct{}), remote: make(chan struct{})} }

// get returns the plain bytes of ref; callers must not modify them. A
// fetch already in flight for ref (a read-ahead) is joined, not repeated.
// Under cas.LocalOnly, a chunk that only a remote has is a *remoteChunk
// (wrapping cas.ErrNotLocal), and so is one whose fetch in flight waits
// for a remote.
func (c *chunkCache) get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	local := cas.IsLocalOnly(ctx)
	for {
		c.mu.Lock()
		if it, ok := c.items[ref]; ok {
			c.order.MoveToFront(it.elem)
			c.mu.Unlock()
			return it.data, nil
		}
		l, joined := c.loading[ref]
		if !joined {
			l = newLoad()
			c.loading[ref] = l
		}
		c.mu.Unlock()
		if !joined {
			c.load(ctx, ref, l)
		} else if err := l.wait(ctx, local); errors.Is(err, cas.ErrNotLocal) {
			return nil, &remoteChunk{ref: ref, err: err}
		} else if err != nil {
			return nil, err
		}
		if errors.Is(l.err, cas.ErrNotLocal) {
			if local {
				return nil, &remoteChunk{ref: ref, err: l.err}
			}
			continue // a local-only load: this caller may fetch
		}
		return l.data, l.err
	}
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

// load fetches ref into l and the cache. The store is asked for its local
// copy first, so that waiters under cas.LocalOnly learn when the fetch
// goes to a remote.
func (c *chunkCache) load(ctx context.Context, ref cas.Ref, l *load) {
	l.data, l.err = c.store.Get(cas.LocalOnly(ctx), ref)
	if errors.Is(l.err, cas.ErrNotLocal) && !cas.IsLocalOnly(ctx) {
		close(l.remote)
		l.data, l.err = c.store.Get(ctx, ref)
	}
	c.finish(ref, l)
}

// finish ends l, the fetch of ref: its chunk goes into the cache, and its
// waiters wake.
func (c *chunkCache) finish(ref cas.Ref, l *load) {
	c.mu.Lock()
	delete(c.loading, ref)
	if l.err == nil {
		if _, ok := c.items[ref]; !ok {
			c.items[ref] = cacheItem{data: l.data, elem: c.order.PushFront(ref)}
			for c.order.Len() > c.max {
				old := c.order.Remove(c.order.Back()).(cas.Ref)
				delete(c.items, old)
			}
		}
	}
	c.mu.Unlock()
	close(l.done)
}
