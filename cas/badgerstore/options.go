package badgerstore

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Options tunes a Store. Zero fields take the defaults below,
// which keep memory bounded (see MemoryBudget) while writing gigabytes.
type Options struct {
	// MemTableSize is the size of one in-memory write table (default
	// 16 MiB). Larger tables mean fewer, larger level-0 files.
	MemTableSize int64
	// NumMemtables is how many write tables may exist at once, the active
	// one included (default 2). Writes stall while all are full.
	NumMemtables int
	// BlockCacheSize caches table blocks (default 8 MiB). Keys are small
	// and tables uncompressed, so a small cache suffices.
	BlockCacheSize int64
	// IndexCacheSize caches table indexes and bloom filters (default
	// 8 MiB); without a bound they stay in memory, about 3 MiB per million
	// chunks.
	IndexCacheSize int64
	// NumCompactors is the number of compaction goroutines (default 2, the
	// minimum Badger allows).
	NumCompactors int
	// ValueThreshold: values at least this long go to the value log,
	// smaller ones stay in the tree (default 1 KiB). Chunks are large, so
	// nearly all go to the value log and the tree holds only pointers.
	ValueThreshold int64
	// ValueLogFileSize is the size of one value log file (default 64 MiB;
	// must exceed cas.MaxChunkSize). The space reserve grows with it.
	ValueLogFileSize int64
	// SpaceReserve is the free space on the store's filesystem below which
	// new data is refused with cas.ErrNoSpace (default ValueLogFileSize +
	// BatchBytes + 2×MemTableSize, 112 MiB; negative turns the guard off).
	// See spaceGuard.
	SpaceReserve int64
	// BatchBytes bounds the plain bytes a Batch holds before it writes a
	// transaction (default 16 MiB).
	BatchBytes int64
	// Salvage opens a store whose logs CheckFiles finds damaged: each
	// damaged file is copied into a damaged-<time> directory in the
	// store's, and Badger then cuts it at the damage (what follows is
	// lost). Without it such a store is refused (ErrDamaged). A damaged
	// table is refused either way.
	Salvage bool
	// Logger receives Badger's warnings and errors (default slog.Default()).
	// Badger's info and debug messages go to the Debug level.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	def := func(p *int64, v int64) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&o.MemTableSize, 16<<20)
	def(&o.BlockCacheSize, 8<<20)
	def(&o.IndexCacheSize, 8<<20)
	def(&o.ValueThreshold, 1<<10)
	def(&o.ValueLogFileSize, 64<<20)
	def(&o.BatchBytes, 16<<20)
	if o.SpaceReserve == 0 {
		o.SpaceReserve = o.spaceReserve()
	}
	if o.NumMemtables <= 0 {
		o.NumMemtables = 2
	}
	if o.NumCompactors < 2 {
		o.NumCompactors = 2
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// memoryOverhead is what the store needs beside Badger's tables and caches:
// the Go runtime, the shared zstd coders (per CPU), table builders during
// flush and compaction, skiplist arena slack. Measured, see
// docs/BENCHMARKS.md.
const memoryOverhead = 64 << 20

// MemoryBudget returns the anonymous memory (heap) the store is expected to
// stay under, whatever the volume written: the write tables (each with an
// arena about 1.3 times MemTableSize), the block and index caches, a
// Batch's pending bytes, and a fixed overhead. With the defaults it is
// about 140 MiB. Callers' own buffers (chunks in flight) come on top.
//
// Value log files are memory-mapped, so resident file pages (page cache
// mapped into the process) also show in RSS; the kernel reclaims them under
// pressure, and they are not counted here.
func (o Options) MemoryBudget() int64 {
	o = o.withDefaults()
	tables := int64(o.NumMemtables) * (o.MemTableSize + o.MemTableSize*3/10)
	return tables + o.BlockCacheSize + o.IndexCacheSize + o.BatchBytes + memoryOverhead
}

func (o Options) badger(dir string) badger.Options {
	return badger.DefaultOptions(dir).
		WithSyncWrites(false). // Sync is the durability point
		WithLogger(slogAdapter{o.Logger}).
		WithMetricsEnabled(false).
		WithMemTableSize(o.MemTableSize).
		WithNumMemtables(o.NumMemtables).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBlockCacheSize(o.BlockCacheSize).
		WithIndexCacheSize(o.IndexCacheSize).
		WithNumCompactors(o.NumCompactors).
		WithValueThreshold(o.ValueThreshold).
		WithValueLogFileSize(o.ValueLogFileSize).
		WithCompression(options.None). // keys and pointers: nothing to gain
		WithNumVersionsToKeep(1).
		WithDetectConflicts(true). // Names.Commit relies on it
		// A table block is checked when it is loaded (not when served
		// from the block cache): damage in a table reads as absent, never
		// as other bytes or a panic. See docs/ARCHITECTURE.md.
		WithChecksumVerificationMode(options.OnBlockRead)
}

// slogAdapter routes Badger's logger to log/slog, quietly: Badger's info
// messages (one per compaction and file) become Debug, and so does its
// cache advice ("Block cache might be too small", every minute while a
// large read runs): the caches are sized by MemoryBudget on purpose, and
// a hint that repeats every minute is not something an operator acts on.
type slogAdapter struct{ l *slog.Logger }

// badgerAdvice are the prefixes of Badger's warnings that are tuning hints.
var badgerAdvice = []string{"%s might be too small", "Cache life expectancy"}

func (a slogAdapter) Warningf(f string, args ...any) {
	for _, p := range badgerAdvice {
		if strings.HasPrefix(f, p) {
			a.log(slog.LevelDebug, f, args)
			return
		}
	}
	a.log(slog.LevelWarn, f, args)
}

func (a slogAdapter) log(level slog.Level, format string, args []any) {
	if !a.l.Enabled(context.Background(), level) {
		return
	}
	a.l.Log(context.Background(), level, strings.TrimSpace(fmt.Sprintf(format, args...)), "component", "badger")
}

func (a slogAdapter) Errorf(f string, args ...any) { a.log(slog.LevelError, f, args) }
func (a slogAdapter) Infof(f string, args ...any)  { a.log(slog.LevelDebug, f, args) }
func (a slogAdapter) Debugf(f string, args ...any) { a.log(slog.LevelDebug-4, f, args) }
