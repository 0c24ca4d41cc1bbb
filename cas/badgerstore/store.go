package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/internal/suspect"
	"github.com/homefs/homefs/cas/stored"
)

// Key prefixes. Chunks: 'c' + 32 ref bytes; names: 'n' + name.
const (
	prefixChunk = 'c'
	prefixName  = 'n'
)

func chunkKey(r cas.Ref) []byte {
	k := make([]byte, 1+len(r))
	k[0] = prefixChunk
	copy(k[1:], r[:])
	return k
}

func nameKey(name string) []byte {
	k := make([]byte, 1+len(name))
	k[0] = prefixName
	copy(k[1:], name)
	return k
}

// Bounds on how much an iteration holds before it releases its read
// transaction and calls back (long read transactions hold back Badger's
// cleanup, and callbacks may call the store).
const (
	pageItems = 1024
	pageBytes = 4 << 20
)

// Store is a cas.Store in a Badger database directory. Only one process
// (and one Store) may open a directory at a time.
type Store struct {
	dir  string
	opts Options
	db   *badger.DB
	lock *os.File

	mu      sync.Mutex
	closed  bool                // GUARDED_BY(mu)
	dead    bool                // GUARDED_BY(mu); db closed by a failed reopen
	paused  bool                // GUARDED_BY(mu); Compact is reopening db
	resume  *sync.Cond          // on mu; broadcast when paused ends or closed is set
	batches map[*batch]struct{} // GUARDED_BY(mu); open batches
	ops     sync.WaitGroup      // calls in flight; Close and reopen wait for them

	// compactMu: one Compact at a time, and Close waits for it. Lock
	// order: compactMu < mu.
	compactMu sync.Mutex
	// writeMu is held shared by every write into Badger's write tables and
	// exclusively by Compact while Badger rewrites a value log file:
	// Badger reads its write table's version without a lock there (a data
	// race with a concurrent write). Lock order: batch.mu < writeMu.
	writeMu sync.RWMutex
	// vlogGen counts the starts and ends of value-log rewrites: odd
	// while one runs. A read that failed while it moved may be retried
	// (Get).
	vlogGen atomic.Uint64

	syncMu sync.Mutex      // serialises Sync
	sealed map[string]bool // GUARDED_BY(syncMu); log files fsynced after they stopped growing
	// writes counts the writes into Badger that ended (done or failed),
	// each counted once Badger holds what it wrote.
	writes atomic.Uint64
	// syncedWrites is writes when the last Sync that succeeded began; a
	// Sync with no write since has nothing to make durable (see sync).
	// GUARDED_BY(syncMu)
	syncedWrites uint64
	synced       bool   // GUARDED_BY(syncMu); a Sync succeeded since the database was opened
	syncs        uint64 // GUARDED_BY(syncMu); the Syncs that reached the files
	// syncedDirTime is the directory's mtime when its files were last all
	// synced. GUARDED_BY(syncMu)
	syncedDirTime time.Time

	suspect suspect.Set[cas.Ref]
	space   *spaceGuard
}

var (
	_ cas.Store     = (*Store)(nil)
	_ cas.Corrupter = (*Store)(nil)
)

// Open opens (creating if needed) the store in dir. It returns an
// error wrapping ErrLocked if another process holds dir.
func Open(dir string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	if opts.ValueLogFileSize <= cas.MaxChunkSize {
		return nil, fmt.Errorf("cas: ValueLogFileSize %d must exceed MaxChunkSize %d", opts.ValueLogFileSize, cas.MaxChunkSize)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("cas: open store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	space := newSpaceGuard(dir, opts)
	if err := space.opening(); err != nil {
		unlockDir(lock)
		return nil, err
	}
	if err := checkBeforeOpen(dir, opts); err != nil {
		unlockDir(lock)
		return nil, err
	}
	db, err := badger.Open(opts.badger(dir))
	if err != nil {
		unlockDir(lock)
		return nil, fmt.Errorf("cas: open store %s: %w", dir, err)
	}
	s := &Store{
		dir:     dir,
		opts:    opts,
		db:      db,
		lock:    lock,
		batches: make(map[*batch]struct{}),
		sealed:  make(map[string]bool),
		space:   space,
	}
	s.resume = sync.NewCond(&s.mu)
	space.start()
	return s, nil
}

// checkBeforeOpen refuses a store whose files Badger would cut or crash
// on (CheckFiles), or with opts.Salvage keeps a copy of each damaged log
// and lets Badger cut it.
func checkBeforeOpen(dir string, opts Options) error {
	found, err := CheckFiles(dir)
	if err != nil {
		return err
	}
	if len(found) == 0 {
		return nil
	}
	if !opts.Salvage || !salvageable(found) {
		return damagedError(dir, found)
	}
	keep, err := preserveDamaged(dir, found)
	if err != nil {
		return fmt.Errorf("cas: keep a copy of the damaged files: %w", err)
	}
	for _, d := range found {
		fixed, err := salvageLog(filepath.Join(dir, d.File))
		if err != nil {
			return fmt.Errorf("cas: salvage %s: %w", d.File, err)
		}
		opts.Logger.Error("store file damaged: salvaging it", "file", d.File, "offset", d.Offset, "damage", d.What,
			"entries_kept_by_a_new_checksum", fixed, "original", filepath.Join(keep, d.File))
	}
	if found, err := CheckFiles(dir); err == nil && len(found) > 0 {
		for _, d := range found {
			opts.Logger.Error("store file damaged beyond repair: Badger cuts it there, what follows is lost", "file", d.File, "offset", d.Offset)
		}
	}
	return nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// begin registers a call in flight, or fails if the store is closed. It
// waits while Compact reopens the database.
func (s *Store) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.paused && !s.closed {
		s.resume.Wait()
	}
	if s.closed {
		return cas.ErrClosed
	}
	s.ops.Add(1)
	return nil
}

func (s *Store) end() { s.ops.Done() }

// dbErr wraps an unexpected Badger error with what we were doing. Badger's
// sentinel errors that callers care about are translated before this.
func dbErr(op string, err error) error {
	if errors.Is(err, badger.ErrDBClosed) {
		return fmt.Errorf("cas: %s: %w", op, cas.ErrClosed)
	}
	return fmt.Errorf("cas: %s: %w", op, err)
}

// use is the admission level of a stored chunk: one that stays in the
// tree (below ValueThreshold) never reaches the value log.
func (s *Store) use(v []byte) spaceUse {
	if int64(len(v)) < s.opts.ValueThreshold {
		return useMeta
	}
	return useData
}

// Get implements cas.Getter.
func (s *Store) Get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.end()
	plain, err := s.getStored(ref, nil)
	if err != nil {
		return nil, err
	}
	return s.verified(ref, plain, cas.Sum(plain))
}

// GetMany implements cas.ManyGetter: the chunks are read one by one and
// verified two at a time (sum2).
func (s *Store) GetMany(ctx context.Context, refs []cas.Ref) ([][]byte, []error) {
	return s.GetManyInto(ctx, refs, nil)
}

// GetManyInto implements cas.IntoGetter: GetMany, each chunk decoded
// into its buffer when it fits.
func (s *Store) GetManyInto(ctx context.Context, refs []cas.Ref, bufs [][]byte) ([][]byte, []error) {
	data, errs := make([][]byte, len(refs)), make([]error, len(refs))
	if err := ctxErr(ctx); err != nil {
		return data, fill(errs, err)
	}
	if err := s.begin(); err != nil {
		return data, fill(errs, err)
	}
	defer s.end()
	for i, ref := range refs {
		var buf []byte
		if i < len(bufs) {
			buf = bufs[i]
		}
		data[i], errs[i] = s.getStored(ref, buf)
	}
	for i := 0; i < len(refs); i += 2 {
		if i+1 == len(refs) || errs[i] != nil || errs[i+1] != nil {
			for j := i; j < min(i+2, len(refs)); j++ {
				if errs[j] == nil {
					data[j], errs[j] = s.verified(refs[j], data[j], cas.Sum(data[j]))
				}
			}
			continue
		}
		sa, sb := sum2(data[i], data[i+1])
		data[i], errs[i] = s.verified(refs[i], data[i], sa)
		data[i+1], errs[i+1] = s.verified(refs[i+1], data[i+1], sb)
	}
	return data, errs
}

// fill sets every element of errs to err and returns errs.
func fill(errs []error, err error) []error {
	for i := range errs {
		errs[i] = err
	}
	return errs
}

// getStored reads and decodes ref's stored form, unverified, into dst's
// room when it fits (stored.DecodeUnverifiedInto): the plain bytes, or an error wrapping cas.ErrNotFound or cas.ErrCorrupt (a stored form
// that does not decode).
func (s *Store) getStored(ref cas.Ref, dst []byte) ([]byte, error) {
	var (
		plain          []byte
		err, decodeErr error
	)
	for try := 0; ; try++ {
		gen := s.vlogGen.Load()
		plain, err, decodeErr = s.getOnce(ref, dst)
		failed := decodeErr != nil || err != nil && !errors.Is(err, badger.ErrKeyNotFound)
		// A value-log rewrite (Compact) that ran during the read may
		// have deleted the file the read's pointer named: a new
		// transaction reads the moved value. Damage fails every try.
		if !failed || try == 2 || !s.vlogMoved(gen) {
			break
		}
	}
	switch {
	case errors.Is(err, badger.ErrKeyNotFound):
		return nil, fmt.Errorf("chunk %s: %w", ref.Short(), cas.ErrNotFound)
	case err != nil:
		return nil, dbErr("get "+ref.Short(), err)
	case decodeErr != nil:
		s.suspect.Add(ref)
		return nil, corruptErr(ref, decodeErr)
	}
	return plain, nil
}

// verified returns plain if sum, its hash, is ref; else an error wrapping
// cas.ErrCorrupt, and ref is suspect.
func (s *Store) verified(ref cas.Ref, plain []byte, sum cas.Ref) ([]byte, error) {
	if err := verifySum(ref, sum); err != nil {
		s.suspect.Add(ref)
		return nil, err
	}
	return plain, nil
}

// getOnce reads and decodes ref's stored form in one transaction: err is
// Badger's, decodeErr what reading or decoding the value met.
func (s *Store) getOnce(ref cas.Ref, dst []byte) (plain []byte, err, decodeErr error) {
	err = s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(chunkKey(ref))
		if err != nil {
			return err
		}
		// Decoding copies, so nothing of the transaction's memory escapes.
		if err := item.Value(func(v []byte) error {
			plain, decodeErr = stored.DecodeUnverifiedInto(dst, v)
			return nil
		}); err != nil {
			decodeErr = err
		}
		return nil
	})
	return plain, err, decodeErr
}

// vlogMoved reports whether a value-log rewrite ran at any time since
// vlogGen read gen.
func (s *Store) vlogMoved(gen uint64) bool {
	return gen%2 == 1 || s.vlogGen.Load() != gen
}

// has reports whether key exists, without reading its value.
func (s *Store) has(key []byte) (bool, error) {
	var ok bool
	err := s.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		ok = err == nil
		return err
	})
	return ok, err
}

// Put implements cas.Putter. Content already present is not rewritten, unless
// a Get found its stored copy corrupt.
func (s *Store) Put(ctx context.Context, data []byte) (cas.Ref, error) {
	if err := ctxErr(ctx); err != nil {
		return cas.Ref{}, err
	}
	if len(data) > cas.MaxChunkSize {
		return cas.Ref{}, tooLarge(len(data))
	}
	if err := s.begin(); err != nil {
		return cas.Ref{}, err
	}
	defer s.end()
	ref := cas.Sum(data)
	key := chunkKey(ref)
	if !s.suspect.Has(ref) {
		ok, err := s.has(key)
		if err != nil {
			return cas.Ref{}, dbErr("put", err)
		}
		if ok {
			return ref, nil
		}
	}
	v, err := stored.Encode(data)
	if err != nil {
		return cas.Ref{}, err
	}
	if err := s.space.admit(int64(len(v)), s.use(v)); err != nil {
		return cas.Ref{}, err
	}
	s.writeMu.RLock()
	err = s.db.Update(func(txn *badger.Txn) error { return txn.Set(key, v) })
	s.writeMu.RUnlock()
	s.writes.Add(1)
	if err != nil {
		return cas.Ref{}, dbErr("put", err)
	}
	s.suspect.Remove(ref)
	return ref, nil
}

// HasMany implements cas.HasManyer.
func (s *Store) HasMany(ctx context.Context, refs []cas.Ref) ([]bool, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.end()
	out := make([]bool, len(refs))
	err := s.db.View(func(txn *badger.Txn) error {
		for i, r := range refs {
			if i%1024 == 1023 {
				if err := ctxErr(ctx); err != nil {
					return err
				}
			}
			_, err := txn.Get(chunkKey(r))
			switch {
			case err == nil:
				out[i] = true
			case !errors.Is(err, badger.ErrKeyNotFound):
				return err
			}
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, dbErr("has", err)
	}
	return out, nil
}

// Enumerate implements cas.Enumerator. It reads keys and the few header bytes
// of each value (sizes), never whole chunks. It runs in pages, each in its
// own read transaction, with fn called outside them: a chunk present
// throughout the call is reported exactly once, one added or deleted
// meanwhile may or may not be.
func (s *Store) Enumerate(ctx context.Context, fn func(cas.ChunkInfo) error) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	start := []byte{prefixChunk}
	for {
		if err := ctxErr(ctx); err != nil {
			return err
		}
		var page []cas.ChunkInfo
		var next []byte
		err := s.db.View(func(txn *badger.Txn) error {
			io := badger.DefaultIteratorOptions
			io.PrefetchValues = false
			io.Prefix = []byte{prefixChunk}
			it := txn.NewIterator(io)
			defer it.Close()
			for it.Seek(start); it.Valid(); it.Next() {
				item := it.Item()
				k := item.Key()
				if len(k) != 1+len(cas.Ref{}) {
					continue // not ours; never written
				}
				if len(page) == pageItems {
					next = item.KeyCopy(nil)
					return nil
				}
				ci := cas.ChunkInfo{Ref: cas.Ref(k[1:])}
				if err := item.Value(func(v []byte) error {
					ci.StoredSize = int64(len(v))
					// A damaged header leaves Size 0; Get reports the damage.
					ci.Size, _ = stored.Size(v)
					return nil
				}); err != nil {
					return err
				}
				page = append(page, ci)
			}
			return nil
		})
		if err != nil {
			return dbErr("enumerate", err)
		}
		for _, ci := range page {
			if err := fn(ci); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		start = next
	}
}

// Delete implements cas.Deleter.
func (s *Store) Delete(ctx context.Context, refs ...cas.Ref) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	// A WriteBatch commits as it grows, so hold writeMu throughout.
	s.writeMu.RLock()
	defer s.writeMu.RUnlock()
	// Counted once Cancel has waited for the batch's commits in flight.
	defer s.writes.Add(1)
	wb := s.db.NewWriteBatch()
	defer wb.Cancel()
	for _, r := range refs {
		if err := wb.Delete(chunkKey(r)); err != nil {
			return dbErr("delete", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return dbErr("delete", err)
	}
	for _, r := range refs {
		s.suspect.Remove(r)
	}
	return nil
}

// Sync implements cas.Syncer: every write that returned before Sync was called
// survives a crash of the process or the machine once Sync returns.
func (s *Store) Sync(ctx context.Context) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	return s.sync()
}

// sync makes the logs durable. Badger's db.Sync msyncs the active
// memtable's write-ahead log and the newest value log file only. With
// SyncWrites off, Badger never syncs a value log file it rotated away
// from, nor the log of a memtable waiting to be flushed; both can hold
// writes made before this Sync. So fsync those files too (a clean file
// costs little, and a sealed value log file is done once), then the
// directory for files created since the last Sync.
//
// A Sync when no write ended since the last one began has nothing to make
// durable, and skips the msyncs and device flushes (some 0.3 ms on a
// virtio disk): the durable commit of a fork right after a capture, whose
// objects that capture made durable, syncs once instead of twice.
func (s *Store) sync() error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	writes := s.writes.Load()
	if s.synced && writes == s.syncedWrites {
		return nil
	}
	if err := s.syncFiles(); err != nil {
		return err
	}
	s.syncedWrites, s.synced = writes, true
	s.syncs++
	return nil
}

// syncFiles is sync's work, with syncMu held.
func (s *Store) syncFiles() error {
	if err := s.db.Sync(); err != nil {
		return dbErr("sync", err)
	}
	// Badger creates a file whenever it rotates a log, which changes the
	// directory's mtime; while it has not, db.Sync covered every file that
	// can hold unsynced writes, and the listing below can be skipped.
	st, err := os.Stat(s.dir)
	if err != nil {
		return fmt.Errorf("cas: sync: %w", err)
	}
	mtime := st.ModTime()
	if mtime.Equal(s.syncedDirTime) {
		return nil
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return fmt.Errorf("cas: sync: %w", err)
	}
	var vlogs []string
	for _, e := range entries {
		name := e.Name()
		switch {
		case strings.HasSuffix(name, ".vlog"):
			vlogs = append(vlogs, name)
		case strings.HasSuffix(name, ".mem"):
			if err := fsyncFile(filepath.Join(s.dir, name)); err != nil {
				return err
			}
		}
	}
	// ReadDir sorts by name and Badger's names are zero-padded numbers, so
	// the last is the active file, which db.Sync covered and may still grow.
	for i, name := range vlogs {
		if i == len(vlogs)-1 || s.sealed[name] {
			continue
		}
		if err := fsyncFile(filepath.Join(s.dir, name)); err != nil {
			return err
		}
		s.sealed[name] = true
	}
	if err := fsyncFile(s.dir); err != nil {
		return err
	}
	// The kernel stamps mtimes from a coarse clock: a file created in the
	// same tick as the last one would not change the mtime. Trust it only
	// once it is older than any tick.
	if time.Since(mtime) > 100*time.Millisecond {
		s.syncedDirTime = mtime
	}
	return nil
}

// fsyncFile fsyncs path; a file deleted meanwhile (a flushed memtable's
// log) needs nothing.
func fsyncFile(path string) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("cas: sync: %w", err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("cas: sync: %w", err)
	}
	return nil
}

// NewBatch implements cas.Batcher.
func (s *Store) NewBatch() cas.Batch { return s.newBatch(false) }

// NewHeldBatch implements cas.SpaceMeter.
func (s *Store) NewHeldBatch() cas.Batch { return s.newBatch(true) }

// Headroom implements cas.SpaceMeter.
func (s *Store) Headroom() (int64, bool) { return s.space.headroom() }

func (s *Store) newBatch(held bool) cas.Batch {
	b := &batch{s: s, held: held}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		b.done = true
		return b
	}
	s.batches[b] = struct{}{}
	return b
}

// batch writes its chunks in Badger transactions of at most
// BatchBytes, so a huge batch never holds more than that in memory.
type batch struct {
	s       *Store
	held    bool // its data was accepted under Headroom (useHeld)
	mu      sync.Mutex
	txn     *badger.Txn          // GUARDED_BY(mu); nil until the first put
	pending int64                // GUARDED_BY(mu); stored bytes in txn
	seen    map[cas.Ref]struct{} // GUARDED_BY(mu); refs in txn
	done    bool                 // GUARDED_BY(mu)
	err     error                // GUARDED_BY(mu); a write forced by Compact failed
}

func (b *batch) Put(data []byte) (cas.Ref, error) {
	if len(data) > cas.MaxChunkSize {
		return cas.Ref{}, tooLarge(len(data))
	}
	if err := b.s.begin(); err != nil {
		return cas.Ref{}, err
	}
	defer b.s.end()
	ref := cas.Sum(data)
	key := chunkKey(ref)
	if !b.s.suspect.Has(ref) {
		ok, err := b.s.has(key)
		if err != nil {
			return cas.Ref{}, dbErr("batch put", err)
		}
		if ok {
			return ref, nil
		}
	}
	v, err := stored.Encode(data)
	if err != nil {
		return cas.Ref{}, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return cas.Ref{}, errBatchDone
	}
	if b.err != nil {
		return cas.Ref{}, b.err
	}
	if _, ok := b.seen[ref]; ok {
		return ref, nil
	}
	use := b.s.use(v)
	if b.held && use == useData {
		use = useHeld
	}
	if err := b.s.space.admitBatch(int64(len(v)), use); err != nil {
		return cas.Ref{}, err
	}
	if b.txn != nil && b.pending+int64(len(v)) > b.s.opts.BatchBytes {
		if err := b.flushLocked(); err != nil {
			b.s.space.settle(int64(len(v)), false)
			return cas.Ref{}, err
		}
	}
	if b.txn == nil {
		b.txn = b.s.db.NewTransaction(true)
		b.seen = make(map[cas.Ref]struct{})
	}
	err = b.txn.Set(key, v)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err = b.flushLocked(); err == nil {
			b.txn = b.s.db.NewTransaction(true)
			b.seen = make(map[cas.Ref]struct{})
			err = b.txn.Set(key, v)
		}
	}
	if err != nil {
		b.s.space.settle(int64(len(v)), false)
		return cas.Ref{}, dbErr("batch put", err)
	}
	b.seen[ref] = struct{}{}
	b.pending += int64(len(v))
	return ref, nil
}

// flushLocked commits the current transaction, if any.
func (b *batch) flushLocked() error {
	if b.txn == nil {
		return nil
	}
	txn, seen, pending := b.txn, b.seen, b.pending
	b.txn, b.seen, b.pending = nil, nil, 0
	b.s.writeMu.RLock()
	err := txn.Commit()
	b.s.writeMu.RUnlock()
	b.s.writes.Add(1)
	b.s.space.settle(pending, true) // a failed commit may have written some
	if err != nil {
		return dbErr("batch commit", err)
	}
	for r := range seen {
		b.s.suspect.Remove(r)
	}
	return nil
}

func (b *batch) Commit(ctx context.Context, durable bool) error {
	if err := b.s.begin(); err != nil {
		return err
	}
	defer b.s.end()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return errBatchDone
	}
	if err := ctxErr(ctx); err != nil {
		b.discardLocked()
		return err
	}
	b.done = true
	b.s.forget(b)
	if b.err != nil {
		return b.err
	}
	if err := b.flushLocked(); err != nil {
		return err
	}
	if durable {
		return b.s.sync()
	}
	return nil
}

func (b *batch) Discard() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.discardLocked()
	b.s.forget(b)
}

func (b *batch) discardLocked() {
	if b.txn != nil {
		b.txn.Discard()
	}
	b.s.space.settle(b.pending, false)
	b.txn, b.seen, b.pending, b.done = nil, nil, 0, true
}

func (s *Store) forget(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.batches, b)
}

// GetName implements cas.Names.
func (s *Store) GetName(ctx context.Context, name string) ([]byte, error) {
	if err := ctxErr(ctx); err != nil {
		return nil, err
	}
	if err := cas.ValidateName(name); err != nil {
		return nil, err
	}
	if err := s.begin(); err != nil {
		return nil, err
	}
	defer s.end()
	var v []byte
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(nameKey(name))
		if err != nil {
			return err
		}
		v, err = item.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nameNotFound(name)
	}
	if err != nil {
		return nil, dbErr("get name", err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, nil
}

// ListNames implements cas.Names. Like Enumerate it runs in pages with fn
// called outside Badger's transactions.
func (s *Store) ListNames(ctx context.Context, prefix string, fn func(name string, value []byte) error) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	pfx := nameKey(prefix)
	start := pfx
	type kv struct {
		name  string
		value []byte
	}
	for {
		if err := ctxErr(ctx); err != nil {
			return err
		}
		var page []kv
		var next []byte
		err := s.db.View(func(txn *badger.Txn) error {
			io := badger.DefaultIteratorOptions
			io.PrefetchValues = false
			io.Prefix = pfx
			it := txn.NewIterator(io)
			defer it.Close()
			size := 0
			for it.Seek(start); it.Valid(); it.Next() {
				item := it.Item()
				if len(page) == pageItems || size >= pageBytes {
					next = item.KeyCopy(nil)
					return nil
				}
				v, err := item.ValueCopy(nil)
				if err != nil {
					return err
				}
				if v == nil {
					v = []byte{}
				}
				page = append(page, kv{string(item.Key()[1:]), v})
				size += len(v)
			}
			return nil
		})
		if err != nil {
			return dbErr("list names", err)
		}
		for _, e := range page {
			if err := fn(e.name, e.value); err != nil {
				return err
			}
		}
		if next == nil {
			return nil
		}
		start = next
	}
}

// Commit implements cas.Names in one Badger transaction; Badger's optimistic
// conflicts with concurrent commits are retried here, so callers only see
// cas.ErrConflict for a failed Expect.
func (s *Store) Commit(ctx context.Context, ops []cas.NameOp, durable bool) error {
	if err := ctxErr(ctx); err != nil {
		return err
	}
	if err := cas.ValidateOps(ops); err != nil {
		return err
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	var size int64
	for _, op := range ops {
		if op.Value != nil {
			size += int64(len(op.Name) + len(op.Value))
		}
	}
	if size > 0 {
		if err := s.space.admit(size, useMeta); err != nil {
			return err
		}
	}
	apply := func(txn *badger.Txn) error {
		for _, op := range ops {
			key := nameKey(op.Name)
			if op.Expect != nil {
				var cur []byte
				present := true
				item, err := txn.Get(key)
				switch {
				case errors.Is(err, badger.ErrKeyNotFound):
					present = false
				case err != nil:
					return err
				default:
					if cur, err = item.ValueCopy(nil); err != nil {
						return err
					}
				}
				if err := op.CheckExpect(present, cur); err != nil {
					return err
				}
			}
			var err error
			if op.Value == nil {
				err = txn.Delete(key)
			} else {
				// Badger keeps the slice until commit; the caller may reuse it.
				err = txn.Set(key, append([]byte{}, op.Value...))
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	for backoff := time.Millisecond; ; backoff = min(2*backoff, 100*time.Millisecond) {
		s.writeMu.RLock()
		err := s.db.Update(apply)
		s.writeMu.RUnlock()
		s.writes.Add(1)
		if errors.Is(err, badger.ErrConflict) {
			select {
			case <-ctx.Done():
				return ctxErr(ctx)
			case <-time.After(backoff):
				continue
			}
		}
		switch {
		case errors.Is(err, cas.ErrConflict):
			return err
		case errors.Is(err, badger.ErrTxnTooBig):
			return fmt.Errorf("cas: commit of %d name ops is too big for one transaction: %w", len(ops), cas.ErrTooLarge)
		case err != nil:
			return dbErr("commit names", err)
		}
		break
	}
	if durable {
		return s.sync()
	}
	return nil
}

// Close implements cas.Store. Open batches are discarded; calls in flight are
// waited for.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.resume.Broadcast()
	batches := s.batches
	s.batches = nil
	s.mu.Unlock()
	for b := range batches {
		b.mu.Lock()
		b.discardLocked()
		b.mu.Unlock()
	}
	// A Compact in progress sees closed and stops at its next step.
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	s.ops.Wait()
	var err error
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if !dead {
		s.space.release() // closing flushes the write table
		err = s.db.Close()
	}
	s.space.close()
	if uerr := unlockDir(s.lock); err == nil {
		err = uerr
	}
	if err != nil {
		return fmt.Errorf("cas: close: %w", err)
	}
	return nil
}

// CorruptForTest flips a byte of ref's stored form so that the next Get
// returns cas.ErrCorrupt. It is for tests (here and in other packages) only.
func (s *Store) CorruptForTest(ref cas.Ref) error {
	if err := s.begin(); err != nil {
		return err
	}
	defer s.end()
	defer s.writes.Add(1)
	err := s.db.Update(func(txn *badger.Txn) error {
		item, err := txn.Get(chunkKey(ref))
		if err != nil {
			return err
		}
		v, err := item.ValueCopy(nil)
		if err != nil {
			return err
		}
		if len(v) == 0 {
			return nil
		}
		v[len(v)-1] ^= 0xff // payload or zstd checksum: both codecs fail
		return txn.Set(chunkKey(ref), v)
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return fmt.Errorf("chunk %s: %w", ref.Short(), cas.ErrNotFound)
	}
	if err != nil {
		return dbErr("corrupt", err)
	}
	return nil
}
