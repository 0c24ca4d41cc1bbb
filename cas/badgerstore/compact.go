package badgerstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/homefs/homefs/cas"
)

var (
	_ cas.Compactor  = (*Store)(nil)
	_ cas.IntoGetter = (*Store)(nil)
)

// prefixCompact keys a marker written and dropped by Compact.
const prefixCompact = 'r'

// Keys below and above every other key (chunks 'c', names 'n', the marker
// 'r', Badger's own "!badger!"), written by settle so that a table holding
// both overlaps every table of the level below it. They hold no value and
// stay in the tree; every listing reads a prefix, so none sees them.
var (
	keyLowest  = []byte{0x00}
	keyHighest = []byte{0xff}
)

// settleTries bounds the compactions settle runs to leave no delete in
// the tree.
const settleTries = 3

// compactRatio is the share of a value log file that must be deleted for
// Compact to rewrite it: any at all, since a deleted chunk must leave the
// disk. Badger wants a ratio strictly between 0 and 1.
const compactRatio = 1e-9

// Compact implements cas.Compactor. Badger keeps a deleted chunk in its value
// log until it rewrites the file holding it; it rewrites only files in which
// compactions counted deleted bytes, and never the file it is appending to.
// So Compact, while calls wait (open batches first write what they hold):
//
//  1. makes Badger count every deleted value (settle): it flushes the
//     write tables and compacts the whole tree into one level, so that
//     each delete meets the values it hides and drops them;
//  2. reopens the database, which starts a new value log file: the one
//     deleted chunks were appended to can then be rewritten;
//
// and then, beside calls, rewrites value log files, most deleted first,
// until none holds a deleted byte (RunValueLogGC until ErrNoRewrite).
// Reads go on; writes wait while a file is rewritten (see writeMu).
//
// Its cost is the tree's keys (not the chunks) and the live data of the
// files that held deleted chunks.
func (s *Store) Compact(ctx context.Context) (cas.CompactResult, error) {
	if err := ctxErr(ctx); err != nil {
		return cas.CompactResult{}, err
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	res := cas.CompactResult{BytesBefore: dirSize(s.dir)}
	// Compacting the tree and rewriting a value log file write new files.
	s.space.release()
	if err := s.reopen(); err != nil {
		return res, err
	}
	if err := s.begin(); err != nil {
		return res, err
	}
	defer s.end()
	for {
		if err := ctxErr(ctx); err != nil {
			return res, err
		}
		if s.isClosed() {
			return res, fmt.Errorf("cas: compact: %w", cas.ErrClosed)
		}
		s.writeMu.Lock()
		s.vlogGen.Add(1)
		err := s.db.RunValueLogGC(compactRatio)
		s.writes.Add(1) // the live data it moved
		s.vlogGen.Add(1)
		s.writeMu.Unlock()
		if errors.Is(err, badger.ErrNoRewrite) {
			break
		}
		if errors.Is(err, badger.ErrRejected) {
			// Another value-log GC runs (only Compact starts one, under
			// compactMu, so this is Badger closing).
			return res, fmt.Errorf("cas: compact: %w", cas.ErrClosed)
		}
		if err != nil {
			return res, dbErr("compact", err)
		}
		res.LogFiles++
	}
	res.BytesAfter = dirSize(s.dir)
	return res, nil
}

// settle makes Badger count every value that a delete (or a newer
// version) hides as discardable, which is what RunValueLogGC picks files
// by. Badger counts a value only when a compaction drops it, and a
// compaction drops it only if the delete is at or below the compaction's
// discard timestamp: no read in flight began before the delete. A
// compaction that ran while one did, or in the moments after Open in
// which Badger's compactors already run but its read watermark is not set
// yet (discard timestamp 0), moved deletes to the bottom level together
// with the values they hide and kept both; the bottom level is compacted
// again only where newer tables overlap it, so those values would stay
// uncounted, and on disk, for good.
//
// So, with no call in flight, settle writes the lowest and highest keys
// and a marker in one transaction (its read timestamp is above every
// delete), drops the marker, which flushes the write tables and compacts
// level 0 (a table spanning every key) with every table of the level
// below, and flattens the tree into one level. A table holding a delete
// afterwards means a delete was kept (Badger moves its read watermark
// asynchronously), so it tries again, a bounded number of times. It leaves
// the write tables and level 0 empty, so that no compaction runs in the
// moments after the reopen that follows.
func (s *Store) settle() error {
	marker := []byte{prefixCompact}
	for try := 1; ; try++ {
		err := s.db.Update(func(txn *badger.Txn) error {
			for _, k := range [][]byte{keyLowest, keyHighest, marker} {
				if err := txn.Set(k, nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return dbErr("compact", err)
		}
		if err := s.db.DropPrefix(marker); err != nil {
			return dbErr("compact", err)
		}
		if err := s.db.Flatten(1); err != nil {
			return dbErr("compact", err)
		}
		kept := keptDeletes(s.db)
		if kept == 0 {
			return nil
		}
		if try == settleTries {
			s.opts.Logger.Warn("store compaction kept deleted chunks; their space comes back at a later gc",
				"tables", kept, "tries", try)
			return nil
		}
	}
}

// keptDeletes counts the tables in which a compaction kept deletes (Badger
// counts their bytes as stale).
func keptDeletes(db *badger.DB) int {
	n := 0
	for _, t := range db.Tables() {
		if t.StaleDataSize > 0 {
			n++
		}
	}
	return n
}

// reopen settles the Badger database (see settle), then closes and
// reopens it, which makes it start a new value log file. Calls wait until
// it is done; open batches commit what they hold to the old database
// first, and put into the new one from then on.
func (s *Store) reopen() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return cas.ErrClosed
	}
	s.paused = true
	batches := make([]*batch, 0, len(s.batches))
	for b := range s.batches {
		batches = append(batches, b)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.paused = false
		s.resume.Broadcast()
		s.mu.Unlock()
	}()
	// No call starts while paused, so nothing is added while we wait.
	s.ops.Wait()
	for _, b := range batches {
		b.mu.Lock()
		if err := b.flushLocked(); err != nil && b.err == nil {
			b.err = err
		}
		b.mu.Unlock()
	}
	// Dropping a prefix blocks writes (they would fail), and a read in
	// flight would keep deletes: settle runs while calls wait.
	if err := s.settle(); err != nil {
		return err
	}
	if err := s.db.Close(); err != nil {
		s.fail()
		return fmt.Errorf("cas: compact: close: %w", err)
	}
	db, err := badger.Open(s.opts.badger(s.dir))
	if err != nil {
		s.fail()
		return fmt.Errorf("cas: compact: reopen %s: %w", s.dir, err)
	}
	s.db = db
	s.syncMu.Lock()
	s.syncedDirTime = time.Time{} // list the new files at the next Sync
	s.synced = false              // and sync the new database's files
	s.syncMu.Unlock()
	return nil
}

// fail marks the store closed after its database could not be reopened.
func (s *Store) fail() {
	s.mu.Lock()
	s.closed, s.dead = true, true
	s.mu.Unlock()
}

func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// dirSize is the disk space the regular files in dir take (as du counts
// it: Badger's value log files are sparse while they are written).
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || d.Name() == ballastName {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += diskUsage(fi)
		}
		return nil
	})
	return n
}

// DiskUsage returns the disk space the files under dir take, as du counts
// it. Tests and benchmarks use it to measure what a store gives back.
func DiskUsage(dir string) int64 { return dirSize(dir) }
