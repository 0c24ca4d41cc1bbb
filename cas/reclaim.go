package cas

import (
	"context"
	"errors"

	"github.com/dgraph-io/badger/v4"
)

// Reclaimer is a store that can give the disk space of deleted chunks back
// (Badger keeps deleted values in its value log until it rewrites it).
type Reclaimer interface {
	// Reclaim rewrites value-log files whose share of deleted data is at
	// least discardRatio (0 < ratio < 1) and reports how many it rewrote.
	Reclaim(ctx context.Context, discardRatio float64) (int, error)
}

var _ Reclaimer = (*BadgerStore)(nil)

// prefixReclaim keys a marker written and dropped by Reclaim.
const prefixReclaim = 'r'

// Reclaim implements Reclaimer with Badger's value-log garbage collection,
// one file at a time until none qualifies.
func (s *BadgerStore) Reclaim(ctx context.Context, discardRatio float64) (int, error) {
	if err := s.begin(); err != nil {
		return 0, err
	}
	defer s.end()
	if discardRatio <= 0 || discardRatio >= 1 {
		discardRatio = 0.5
	}
	// Deleted keys reach the value log's discard statistics only once
	// their memtable is flushed and the tables compacted. Badger flushes
	// every memtable when a prefix is dropped, so drop a marker key that
	// exists only for this; then flatten the tree.
	marker := []byte{prefixReclaim}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(marker, nil) }); err != nil {
		return 0, dbErr("reclaim", err)
	}
	if err := s.db.DropPrefix(marker); err != nil {
		return 0, dbErr("reclaim", err)
	}
	if err := s.db.Flatten(1); err != nil {
		return 0, dbErr("reclaim", err)
	}
	n := 0
	for {
		if err := ctxErr(ctx); err != nil {
			return n, err
		}
		err := s.db.RunValueLogGC(discardRatio)
		if errors.Is(err, badger.ErrNoRewrite) || errors.Is(err, badger.ErrRejected) {
			return n, nil
		}
		if err != nil {
			return n, dbErr("reclaim", err)
		}
		n++
	}
}
