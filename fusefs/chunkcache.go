package fusefs

import (
	"container/list"
	"context"
	"sync"

	"homefs/cas"
)

// chunkCache keeps recently read chunks in their plain form, so that a
// reader going through a chunk in kernel-sized pieces decompresses and
// verifies it once. Chunks are immutable, so entries never go stale.
type chunkCache struct {
	store cas.Getter
	max   int // entries

	mu    sync.Mutex
	order *list.List // of cas.Ref, most recent first; GUARDED_BY(mu)
	items map[cas.Ref]cacheItem
}

type cacheItem struct {
	data []byte
	elem *list.Element
}

func newChunkCache(store cas.Getter, maxEntries int) *chunkCache {
	return &chunkCache{store: store, max: maxEntries, order: list.New(), items: make(map[cas.Ref]cacheItem)}
}

// get returns the plain bytes of ref; callers must not modify them.
func (c *chunkCache) get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	c.mu.Lock()
	if it, ok := c.items[ref]; ok {
		c.order.MoveToFront(it.elem)
		c.mu.Unlock()
		return it.data, nil
	}
	c.mu.Unlock()
	data, err := c.store.Get(ctx, ref)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.items[ref]; !ok {
		c.items[ref] = cacheItem{data: data, elem: c.order.PushFront(ref)}
		for c.order.Len() > c.max {
			old := c.order.Remove(c.order.Back()).(cas.Ref)
			delete(c.items, old)
		}
	}
	return data, nil
}
