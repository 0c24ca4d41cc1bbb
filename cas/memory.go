package cas

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/homefs/homefs/cas/internal/suspect"
)

// MemoryStore is an in-memory Store for tests. It keeps a copy of each
// chunk's plain bytes, uncompressed, and re-hashes it on Get like the disk
// store, so corruption tests mean the same on both. The zero value is an
// empty, open store.
type MemoryStore struct {
	mu      sync.RWMutex
	chunks  map[Ref][]byte    // GUARDED_BY(mu); plain bytes, never handed out
	names   map[string][]byte // GUARDED_BY(mu)
	closed  bool              // GUARDED_BY(mu)
	suspect suspect.Set[Ref]
}

var (
	_ Store     = (*MemoryStore)(nil)
	_ Corrupter = (*MemoryStore)(nil)
)

// NewMemory returns an empty MemoryStore.
func NewMemory() *MemoryStore { return &MemoryStore{} }

// lockWrite takes the write lock of an open store and initialises the maps.
func (m *MemoryStore) lockWrite() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return ErrClosed
	}
	if m.chunks == nil {
		m.chunks = make(map[Ref][]byte)
		m.names = make(map[string][]byte)
	}
	return nil
}

func (m *MemoryStore) lockRead() error {
	m.mu.RLock()
	if m.closed {
		m.mu.RUnlock()
		return ErrClosed
	}
	return nil
}

// Get implements Getter.
func (m *MemoryStore) Get(ctx context.Context, ref Ref) ([]byte, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	if err := m.lockRead(); err != nil {
		return nil, err
	}
	v, ok := m.chunks[ref]
	var plain []byte
	if ok {
		plain = append([]byte{}, v...) // never nil; safe after unlock
	}
	m.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("chunk %s: %w", ref.Short(), ErrNotFound)
	}
	if err := verifyChunk(ref, plain); err != nil {
		m.suspect.Add(ref)
		return nil, err
	}
	return plain, nil
}

// Put implements Putter.
func (m *MemoryStore) Put(ctx context.Context, data []byte) (Ref, error) {
	if err := ctxErr(ctx); err != nil {
		return Ref{}, err
	}
	if len(data) > MaxChunkSize {
		return Ref{}, tooLarge(len(data))
	}
	ref := Sum(data)
	if err := m.lockRead(); err != nil {
		return Ref{}, err
	}
	_, ok := m.chunks[ref]
	m.mu.RUnlock()
	if ok && !m.suspect.Has(ref) {
		return ref, nil
	}
	v := bytes.Clone(data) // outside the lock
	if err := m.lockWrite(); err != nil {
		return Ref{}, err
	}
	m.chunks[ref] = v
	m.mu.Unlock()
	m.suspect.Remove(ref)
	return ref, nil
}

// HasMany implements HasManyer.
func (m *MemoryStore) HasMany(ctx context.Context, refs []Ref) ([]bool, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	if err := m.lockRead(); err != nil {
		return nil, err
	}
	defer m.mu.RUnlock()
	out := make([]bool, len(refs))
	for i, r := range refs {
		_, out[i] = m.chunks[r]
	}
	return out, nil
}

// Enumerate implements Enumerator. fn runs without the store's lock held,
// so it may call the store.
func (m *MemoryStore) Enumerate(ctx context.Context, fn func(ChunkInfo) error) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := m.lockRead(); err != nil {
		return err
	}
	infos := make([]ChunkInfo, 0, len(m.chunks))
	for r, v := range m.chunks {
		infos = append(infos, ChunkInfo{Ref: r, Size: int64(len(v)), StoredSize: int64(len(v))})
	}
	m.mu.RUnlock()
	slices.SortFunc(infos, func(a, b ChunkInfo) int { return bytes.Compare(a.Ref[:], b.Ref[:]) })
	for i, ci := range infos {
		if i%1024 == 0 {
			if err := ctxErr(ctx); err != nil {
				return err
			}
		}
		if err := fn(ci); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Deleter.
func (m *MemoryStore) Delete(ctx context.Context, refs ...Ref) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := m.lockWrite(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	for _, r := range refs {
		delete(m.chunks, r)
		m.suspect.Remove(r)
	}
	return nil
}

// Sync implements Syncer; memory has nothing to make durable.
func (m *MemoryStore) Sync(ctx context.Context) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := m.lockRead(); err != nil {
		return err
	}
	m.mu.RUnlock()
	return nil
}

// NewBatch implements Batcher.
func (m *MemoryStore) NewBatch() Batch { return &memBatch{m: m} }

type memBatch struct {
	m       *MemoryStore
	mu      sync.Mutex
	pending map[Ref][]byte // GUARDED_BY(mu)
	done    bool           // GUARDED_BY(mu)
}

var errBatchDone = fmt.Errorf("cas: batch already committed or discarded")

func (b *memBatch) Put(data []byte) (Ref, error) {
	if len(data) > MaxChunkSize {
		return Ref{}, tooLarge(len(data))
	}
	if err := b.m.lockRead(); err != nil {
		return Ref{}, err
	}
	b.m.mu.RUnlock()
	ref := Sum(data)
	v := bytes.Clone(data)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return Ref{}, errBatchDone
	}
	if b.pending == nil {
		b.pending = make(map[Ref][]byte)
	}
	b.pending[ref] = v
	return ref, nil
}

func (b *memBatch) Commit(ctx context.Context, durable bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return errBatchDone
	}
	if err := ctxErr(ctx); err != nil {
		return err
	}
	b.done = true
	if err := b.m.lockWrite(); err != nil {
		return err
	}
	for r, v := range b.pending {
		if _, ok := b.m.chunks[r]; !ok || b.m.suspect.Has(r) {
			b.m.chunks[r] = v
			b.m.suspect.Remove(r)
		}
	}
	b.m.mu.Unlock()
	b.pending = nil
	return nil
}

func (b *memBatch) Discard() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	b.pending = nil
}

// GetName implements Names.
func (m *MemoryStore) GetName(ctx context.Context, name string) ([]byte, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := m.lockRead(); err != nil {
		return nil, err
	}
	defer m.mu.RUnlock()
	v, ok := m.names[name]
	if !ok {
		return nil, nameNotFound(name)
	}
	return append([]byte{}, v...), nil
}

// ListNames implements Names. fn runs without the store's lock held.
func (m *MemoryStore) ListNames(ctx context.Context, prefix string, fn func(name string, value []byte) error) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := m.lockRead(); err != nil {
		return err
	}
	type kv struct {
		k string
		v []byte
	}
	var list []kv
	for k, v := range m.names {
		if strings.HasPrefix(k, prefix) {
			list = append(list, kv{k, append([]byte{}, v...)})
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(list, func(a, b kv) int { return strings.Compare(a.k, b.k) })
	for _, e := range list {
		if err := ctxErr(ctx); err != nil {
			return err
		}
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// Commit implements Names.
func (m *MemoryStore) Commit(ctx context.Context, ops []NameOp, durable bool) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := ValidateOps(ops); err != nil {
		return err
	}
	if err := m.lockWrite(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	// Stage into an overlay so that a failed Expect leaves nothing applied.
	type state struct {
		v       []byte
		present bool
	}
	staged := make(map[string]state, len(ops))
	for _, op := range ops {
		st, ok := staged[op.Name]
		if !ok {
			st.v, st.present = m.names[op.Name]
		}
		if err := op.CheckExpect(st.present, st.v); err != nil {
			return err
		}
		if op.Value == nil {
			staged[op.Name] = state{}
		} else {
			staged[op.Name] = state{v: append([]byte{}, op.Value...), present: true}
		}
	}
	for k, st := range staged {
		if st.present {
			m.names[k] = st.v
		} else {
			delete(m.names, k)
		}
	}
	return nil
}

// Close implements Store.
func (m *MemoryStore) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// CorruptForTest damages the stored form of ref in place, for tests of
// corruption handling. It returns an error wrapping ErrNotFound if ref is
// absent.
func (m *MemoryStore) CorruptForTest(ref Ref) error {
	if err := m.lockWrite(); err != nil {
		return err
	}
	defer m.mu.Unlock()
	v, ok := m.chunks[ref]
	if !ok {
		return fmt.Errorf("chunk %s: %w", ref.Short(), ErrNotFound)
	}
	v = bytes.Clone(v)
	if len(v) == 0 {
		v = []byte{0} // the empty chunk: any byte damages it
	} else {
		v[len(v)-1] ^= 0xff
	}
	m.chunks[ref] = v
	return nil
}

// verifyChunk checks that plain hashes to ref, returning an error wrapping
// ErrCorrupt if not.
func verifyChunk(ref Ref, plain []byte) error {
	if sum := Sum(plain); sum != ref {
		return fmt.Errorf("chunk %s: content hashes to %s: %w", ref.Short(), sum.Short(), ErrCorrupt)
	}
	return nil
}
