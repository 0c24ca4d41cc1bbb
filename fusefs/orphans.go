package fusefs

import (
	"sync"

	"github.com/homefs/homefs/cas"
)

// orphans are batches whose commit failed (a spill's or a flush's, when
// the store could not write). Their chunks are already named by their
// files' chunk lists, so pendingBatch.Discard hands them here instead of
// dropping them: they stay readable in pending, and the next flush puts
// them again into its own batch. A failed commit thus loses nothing and,
// while the store stays broken, surfaces as the error of every flush.
type orphans struct {
	mu      sync.Mutex
	batches []*pendingBatch // GUARDED_BY(mu)
}

// adopt keeps the chunks of b for the next flush.
func (o *orphans) adopt(b *pendingBatch) {
	o.mu.Lock()
	o.batches = append(o.batches, b)
	o.mu.Unlock()
}

// settle puts the chunks of every orphan into batch; done releases them
// from pending once batch committed.
func (o *orphans) settle(batch cas.Batch) (done func(), err error) {
	o.mu.Lock()
	adopted := o.batches
	o.mu.Unlock()
	for _, b := range adopted {
		for _, ref := range b.refs {
			if data, ok := b.pending.get(ref); ok {
				if _, err := batch.Put(data); err != nil {
					return nil, err
				}
			}
		}
	}
	return func() {
		o.mu.Lock()
		o.batches = o.batches[len(adopted):]
		o.mu.Unlock()
		for _, b := range adopted {
			b.pending.drop(b.refs)
		}
	}, nil
}
