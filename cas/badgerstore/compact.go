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

// compactRatio is the share of a value log file that must be deleted for
// Compact to rewrite it: any at all, since a deleted chunk must leave the
// disk. Badger wants a ratio strictly between 0 and 1.
const compactRatio = 1e-9

// Compact implements cas.Compactor. Badger keeps a deleted chunk in its value
// log until it rewrites the file holding it, and never rewrites the file it
// is appending to. So Compact:
//
//  1. reopens the database, which starts a new value log file: the one
//     deleted chunks were appended to can then be rewritten (calls wait
//     meanwhile; open batches first write what they hold);
//  2. flushes the write tables and compacts every level, so that each
//     deleted key meets the value it hides and the value is counted as
//     discardable (Badger counts only what compactions drop);
//  3. rewrites value log files, most deleted first, until none holds a
//     deleted byte (RunValueLogGC until ErrNoRewrite). Reads go on;
//     writes wait while a file is rewritten (see writeMu).
//
// Its cost is the live data of the files that held deleted chunks.
func (s *Store) Compact(ctx context.Context) (cas.CompactResult, error) {
	if err := ctxErr(ctx); err != nil {
		return cas.CompactResult{}, err
	}
	s.compactMu.Lock()
	defer s.compactMu.Unlock()
	res := cas.CompactResult{BytesBefore: dirSize(s.dir)}
	// Rewriting a value log file writes its live data into a new one.
	s.space.release()
	if err := s.reopen(); err != nil {
		return res, err
	}
	if err := s.begin(); err != nil {
		return res, err
	}
	defer s.end()
	if err := s.db.Flatten(1); err != nil {
		return res, dbErr("compact", err)
	}
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

// reopen closes and reopens the Badger database, which makes it start a
// new value log file, and flushes its write tables. Calls wait until it is
// done; open batches commit what they hold to the old database first, and
// put into the new one from then on.
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
	// Badger flushes every write table before it drops a prefix, and
	// compacts level 0 into the levels below; a marker key that exists
	// only for this gives it a prefix to drop. Dropping blocks writes
	// (they would fail), so it runs while calls wait.
	marker := []byte{prefixCompact}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set(marker, nil) }); err != nil {
		return dbErr("compact", err)
	}
	if err := db.DropPrefix(marker); err != nil {
		return dbErr("compact", err)
	}
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
