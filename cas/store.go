package cas

import (
	"context"
	"errors"
)

var (
	// ErrNotFound: no chunk (or name) under that key.
	ErrNotFound = errors.New("cas: not found")
	// ErrCorrupt: the stored bytes do not hash to their ref (or do not
	// decompress). The bytes are never returned.
	ErrCorrupt = errors.New("cas: corrupt chunk")
	// ErrConflict: a conditional name update found another value.
	ErrConflict = errors.New("cas: conflict")
	// ErrClosed: the store was closed.
	ErrClosed = errors.New("cas: store closed")
	// ErrTooLarge: a chunk over MaxChunkSize, or a name's value over
	// MaxNameValueSize.
	ErrTooLarge = errors.New("cas: too large")
	// ErrNoSpace: the store's filesystem is (nearly) full; new data is
	// refused before the store could crash on it. Deletes still work, and
	// writes resume once space is freed.
	ErrNoSpace = errors.New("cas: no space left on the store's disk")
	// ErrInvalidName: a name that is empty, too long, not UTF-8, or holds a
	// control character (NUL included).
	ErrInvalidName = errors.New("cas: invalid name")
)

// MaxChunkSize bounds a single stored object (file chunks and manifest
// nodes alike).
const MaxChunkSize = 16 << 20

// Limits of the Names namespace.
const (
	MaxNameLen       = 1024    // bytes
	MaxNameValueSize = 1 << 20 // bytes
)

// Getter returns a chunk's plain bytes after checking them against ref.
// The returned slice belongs to the caller.
type Getter interface {
	Get(ctx context.Context, ref Ref) ([]byte, error)
}

// ManyGetter is a Getter that also returns several chunks in one call:
// data[i] and errs[i] are what Get(ctx, refs[i]) returns, each chunk
// checked against its ref. A store implements it when reading chunks
// together costs less than one by one (the Badger store verifies them
// in pairs).
type ManyGetter interface {
	Getter
	GetMany(ctx context.Context, refs []Ref) (data [][]byte, errs []error)
}

// GetMany returns refs' chunks through g's GetMany if it has one, else
// through Get for each.
func GetMany(ctx context.Context, g Getter, refs []Ref) ([][]byte, []error) {
	if m, ok := g.(ManyGetter); ok {
		return m.GetMany(ctx, refs)
	}
	data, errs := make([][]byte, len(refs)), make([]error, len(refs))
	for i, ref := range refs {
		data[i], errs[i] = g.Get(ctx, ref)
	}
	return data, errs
}

// IntoGetter is a ManyGetter that also decodes chunks into room its
// caller gives, so that a caller that recycles buffers allocates nothing:
// data[i] is bufs[i][:n] when chunk i fits in cap(bufs[i]) (a nil buffer
// has no room), else a new slice; the rest is as GetMany. A chunk that
// failed leaves its buffer's content undefined.
type IntoGetter interface {
	ManyGetter
	GetManyInto(ctx context.Context, refs []Ref, bufs [][]byte) (data [][]byte, errs []error)
}

// GetManyInto returns refs' chunks through g's GetManyInto if it has one,
// into bufs, else as GetMany does.
func GetManyInto(ctx context.Context, g Getter, refs []Ref, bufs [][]byte) ([][]byte, []error) {
	if m, ok := g.(IntoGetter); ok {
		return m.GetManyInto(ctx, refs, bufs)
	}
	return GetMany(ctx, g, refs)
}

// Putter stores data under Sum(data) and returns that ref. A put is not
// durable until Sync (or a durable batch commit) returns.
type Putter interface {
	Put(ctx context.Context, data []byte) (Ref, error)
}

// HasManyer reports, for each ref, whether the store holds it.
type HasManyer interface {
	HasMany(ctx context.Context, refs []Ref) ([]bool, error)
}

// ChunkInfo describes a stored chunk.
type ChunkInfo struct {
	Ref        Ref
	Size       int64 // plain bytes
	StoredSize int64 // bytes after compression
}

// Enumerator calls fn for every stored chunk, in ref order.
type Enumerator interface {
	Enumerate(ctx context.Context, fn func(ChunkInfo) error) error
}

// Deleter removes chunks; deleting an absent ref is not an error.
type Deleter interface {
	Delete(ctx context.Context, refs ...Ref) error
}

// Syncer makes every earlier put and name update durable.
type Syncer interface {
	Sync(ctx context.Context) error
}

// Batch collects puts that are committed together (a Badger write batch). It
// is not atomic: a large batch is written in several transactions to bound
// memory, and a Discard after that keeps what was already written (harmless
// in a content-addressed store: such chunks are merely unreferenced). A
// Batch is finished by Commit or Discard; later calls return an error.
type Batch interface {
	Put(data []byte) (Ref, error)
	// Commit writes the batch; with durable set it returns only once the
	// batch (and everything before it) survives a crash.
	Commit(ctx context.Context, durable bool) error
	Discard()
}

// Batcher starts batches.
type Batcher interface {
	NewBatch() Batch
}

// SpaceMeter is implemented by a store that refuses new data while its
// disk is nearly full (ErrNoSpace). A caller that accepts data now and
// stores it later (a write(2) buffered in memory) checks Headroom when it
// accepts the data, as ext4 reserves blocks at write(2) for delayed
// allocation, and later stores it through a held batch, whose puts may use
// part of the store's reserve: what a writer was told is written can then
// always be stored.
type SpaceMeter interface {
	// Headroom is how many bytes of new data the store would take now; ok
	// is false when it sets no limit.
	Headroom() (n int64, ok bool)
	// NewHeldBatch starts a batch for data accepted under Headroom.
	NewHeldBatch() Batch
}

// MeterOf returns the SpaceMeter of s or of a store it wraps (one with an
// Unwrap() Store method, which passes its batches through), if any.
func MeterOf(s Store) (SpaceMeter, bool) {
	for s != nil {
		if m, ok := s.(SpaceMeter); ok {
			return m, true
		}
		w, ok := s.(interface{ Unwrap() Store })
		if !ok {
			break
		}
		s = w.Unwrap()
	}
	return nil, false
}

// NameOp is one step of an atomic Names.Commit. A nil Value deletes the
// name; a non-nil empty Value stores an empty value. Expect, when set, makes
// the whole commit fail with ErrConflict unless the name currently holds
// exactly *Expect (a nil *Expect slice means "must not exist"; use
// Expect([]byte{}) for "exists and is empty"). Ops apply in order, so an
// Expect sees the effect of earlier ops of the same commit.
type NameOp struct {
	Name   string
	Value  []byte
	Expect *[]byte
}

// Names is a small mutable namespace kept beside the chunks: session heads,
// snapshot records, indexes. Names are printable, without NUL, at most 1024
// bytes; values at most 1 MiB.
type Names interface {
	// GetName returns the value (never nil, possibly empty) or an error
	// wrapping ErrNotFound.
	GetName(ctx context.Context, name string) ([]byte, error)
	// ListNames calls fn for each name with the prefix, in byte order.
	ListNames(ctx context.Context, prefix string, fn func(name string, value []byte) error) error
	// Commit applies every op atomically, or none.
	Commit(ctx context.Context, ops []NameOp, durable bool) error
}

// Corrupter damages a stored chunk in place so that tests can check that
// corruption is detected. Only test code calls it.
type Corrupter interface {
	CorruptForTest(ref Ref) error
}

// Store is everything homefs needs of its storage.
type Store interface {
	Getter
	Putter
	HasManyer
	Enumerator
	Deleter
	Syncer
	Batcher
	Names
	// Close releases the store; later calls return ErrClosed, a second
	// Close returns nil. Close does not imply Sync of unsynced writes on
	// every implementation; call Sync first when it matters.
	Close() error
}

// Expect returns a pointer usable as NameOp.Expect. Note that Expect(nil)
// means "must not exist", like ExpectAbsent; pass []byte{} to expect an
// existing empty value.
func Expect(v []byte) *[]byte { return &v }

// ExpectAbsent is a NameOp.Expect that requires the name not to exist.
func ExpectAbsent() *[]byte {
	var v []byte
	return &v
}
