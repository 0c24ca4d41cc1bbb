package fusefs

import (
	"container/list"
	"context"
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

	// ahead bounds the read-ahead fetches in flight.
	ahead chan struct{}
}

// load is one fetch in flight; waiters block on done.
type load struct {
	done chan struct{}
	data []byte
	err  error
}

// readAheadChunks is how many chunks past a sequential read are fetched in
// the background (one kernel request's worth: MaxWrite), and maxAhead how
// many such fetches run at once: two per core, so that one fetch's wait
// for the disk overlaps another's hashing.
const readAheadChunks = 16

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
		ahead:   make(chan struct{}, maxAhead),
	}
}

// prefetch fetches refs into the cache in the background, as far as the
// read-ahead budget allows; errors are left for the real read to report.
func (c *chunkCache) prefetch(refs []cas.Ref) {
	for _, ref := range refs {
		c.mu.Lock()
		_, cached := c.items[ref]
		_, inflight := c.loading[ref]
		c.mu.Unlock()
		if cached || inflight {
			continue
		}
		select {
		case c.ahead <- struct{}{}:
		default:
			return
		}
		go func() {
			defer func() { <-c.ahead }()
			_, _ = c.get(context.Background(), ref)
		}()
	}
}

// get returns the plain bytes of ref; callers must not modify them. A
// fetch already in flight for ref (a read-ahead) is joined, not repeated.
func (c *chunkCache) get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	c.mu.Lock()
	if it, ok := c.items[ref]; ok {
		c.order.MoveToFront(it.elem)
		c.mu.Unlock()
		return it.data, nil
	}
	if l, ok := c.loading[ref]; ok {
		c.mu.Unlock()
		select {
		case <-l.done:
			return l.data, l.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l := &load{done: make(chan struct{})}
	c.loading[ref] = l
	c.mu.Unlock()

	l.data, l.err = c.store.Get(ctx, ref)

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
	return l.data, l.err
}
