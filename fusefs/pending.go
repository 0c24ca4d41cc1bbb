package fusefs

import (
	"context"
	"sync"

	"github.com/homefs/homefs/cas"
)

// pendingChunks holds the plain bytes of chunks put into batches that have
// not committed yet. A spill publishes a chunk's ref in its file's chunk
// list and drops the write buffer as soon as the chunk is put, but the
// store has the chunk only once the batch commits; until then readers and
// writers of the file (which do not wait for flushes or spills of other
// files) find the bytes here. The zero value is ready to use.
type pendingChunks struct {
	mu sync.Mutex
	m  map[cas.Ref]*pendingChunk // GUARDED_BY(mu)
}

type pendingChunk struct {
	data    []byte
	batches int // uncommitted batches holding the chunk
}

func (p *pendingChunks) add(ref cas.Ref, data []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[cas.Ref]*pendingChunk)
	}
	c, ok := p.m[ref]
	if !ok {
		c = &pendingChunk{data: data}
		p.m[ref] = c
	}
	c.batches++
}

func (p *pendingChunks) drop(refs []cas.Ref) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ref := range refs {
		if c, ok := p.m[ref]; ok {
			if c.batches--; c.batches <= 0 {
				delete(p.m, ref)
			}
		}
	}
}

// get returns the bytes of ref if a batch not committed yet holds it; they
// must not be modified.
func (p *pendingChunks) get(ref cas.Ref) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.m[ref]
	if !ok {
		return nil, false
	}
	return c.data, true
}

// pendingBatch is a batch whose puts stay readable through pending until it
// commits. A chunk's ref is published in its file as soon as it is put, so
// the batch is never thrown away: Discard without a successful Commit
// commits what was put (an error half-way through a spill or a flush must
// not lose bytes acknowledged earlier), and if that fails too the batch is
// handed to orphan, which keeps its chunks in pending until a flush stores
// them (orphans.go).
type pendingBatch struct {
	cas.Batch
	pending *pendingChunks
	orphan  func(*pendingBatch)
	mu      sync.Mutex // puts come from several goroutines
	refs    []cas.Ref  // GUARDED_BY(mu)
}

// newBatch starts a batch for content of s; use it instead of
// s.store.NewBatch so that spilled chunks stay readable before the commit.
// Everything a session stores was accepted from a writer already (write
// buffers under the headroom check of roomFor, staging and backing files,
// the journal), so its batches are held batches (cas.SpaceMeter).
func (s *Session) newBatch() *pendingBatch {
	var b cas.Batch
	if m, ok := s.store.(cas.SpaceMeter); ok {
		b = m.NewHeldBatch()
	} else {
		b = s.store.NewBatch()
	}
	return &pendingBatch{Batch: b, pending: &s.pending, orphan: s.orphans.adopt}
}

func (b *pendingBatch) Put(data []byte) (cas.Ref, error) {
	ref, err := b.Batch.Put(data)
	if err != nil {
		return ref, err
	}
	b.pending.add(ref, data)
	b.mu.Lock()
	b.refs = append(b.refs, ref)
	b.mu.Unlock()
	return ref, nil
}

// Commit ignores ctx's cancellation, for the same reason: an interrupted
// request (FUSE_INTERRUPT when the writer is signalled) must not throw
// away published chunks.
func (b *pendingBatch) Commit(ctx context.Context, durable bool) error {
	err := b.Batch.Commit(context.WithoutCancel(ctx), durable)
	if err == nil {
		b.pending.drop(b.refs)
		b.refs = nil
	}
	return err
}

func (b *pendingBatch) Discard() {
	if len(b.refs) > 0 {
		if err := b.Batch.Commit(context.Background(), false); err != nil {
			b.Batch.Discard()
			b.orphan(b)
			return
		}
	}
	b.Batch.Discard()
	b.pending.drop(b.refs)
	b.refs = nil
}
