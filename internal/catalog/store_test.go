package catalog

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"

	"github.com/homefs/homefs/cas"
)

// countingStore counts the writes (and reads) that reach the store, to show
// which operations are O(1) in the size of a tree.
type countingStore struct {
	cas.Store
	puts, commits, nameOps, gets atomic.Int64
}

func (s *countingStore) Put(ctx context.Context, data []byte) (cas.Ref, error) {
	s.puts.Add(1)
	return s.Store.Put(ctx, data)
}

func (s *countingStore) Get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, ref)
}

func (s *countingStore) Commit(ctx context.Context, ops []cas.NameOp, durable bool) error {
	s.commits.Add(1)
	s.nameOps.Add(int64(len(ops)))
	return s.Store.Commit(ctx, ops, durable)
}

func (s *countingStore) NewBatch() cas.Batch {
	return &countingBatch{Batch: s.Store.NewBatch(), s: s}
}

type countingBatch struct {
	cas.Batch
	s *countingStore
}

func (b *countingBatch) Put(data []byte) (cas.Ref, error) {
	b.s.puts.Add(1)
	return b.Batch.Put(data)
}

// tamperStore returns altered bytes for chosen refs, as a damaged disk
// would if the store did not check hashes.
type tamperStore struct {
	cas.Store
	mu   sync.Mutex
	flip map[cas.Ref]bool
}

func (s *tamperStore) Get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	s.mu.Lock()
	flip := s.flip[ref]
	s.mu.Unlock()
	data, err := s.Store.Get(ctx, ref)
	if err == nil && flip {
		data = bytes.Clone(data)
		data[len(data)/2] ^= 0x20
	}
	return data, err
}
