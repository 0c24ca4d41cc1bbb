package badgerstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/dgraph-io/badger/v4"

	"github.com/homefs/homefs/cas"
)

// staleTables returns the tables in which a compaction kept deletes it
// could not drop, and the number of level-0 tables.
func staleTables(db *badger.DB) (stale, level0 int) {
	for _, ti := range db.Tables() {
		if ti.StaleDataSize > 0 {
			stale++
		}
		if ti.Level == 0 {
			level0++
		}
	}
	return stale, level0
}

// TestCompactDeletesKeptByACompaction: deleted chunks give their space
// back even when a compaction has already moved their deletes to the
// bottom level together with the values they hide, keeping both. Badger
// does that whenever its discard timestamp is below the deletes: while a
// read that began before them is in flight, and in the moments after Open
// in which its compactors already run but its read watermark is not set
// yet (a reopen of a store whose level 0 is due for a compaction). Such a
// compaction counts nothing as discardable, and the bottom level is
// compacted again only when newer tables overlap it, so no value log file
// would be rewritten.
func TestCompactDeletesKeptByACompaction(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), Options{ValueLogFileSize: 17 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rng := rand.New(rand.NewPCG(7, 8))
	var refs []cas.Ref
	for i := 0; i < 300; i++ { // spans two value log files
		b := make([]byte, 64<<10)
		for j := range b {
			b[j] = byte(rng.Uint32())
		}
		r, err := s.Put(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	reader := s.db.NewTransaction(false)
	if err := s.Delete(ctx, refs[:250]...); err != nil {
		t.Fatal(err)
	}
	// Flush the write table and compact level 0 into the bottom level
	// while the read holds the discard timestamp below the deletes.
	marker := []byte{prefixCompact}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set(marker, nil) }); err != nil {
		t.Fatal(err)
	}
	if err := s.db.DropPrefix(marker); err != nil {
		t.Fatal(err)
	}
	reader.Discard()
	if stale, level0 := staleTables(s.db); stale == 0 || level0 > 0 {
		t.Fatalf("%d tables with kept deletes, %d at level 0: the test proves nothing", stale, level0)
	}

	res, err := s.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compact: %+v", res)
	if res.LogFiles == 0 || res.BytesAfter >= res.BytesBefore/2 {
		t.Errorf("Compact rewrote %d value log files: store files %d bytes after, %d before; 250 of 300 chunks were deleted",
			res.LogFiles, res.BytesAfter, res.BytesBefore)
	}
	if stale, _ := staleTables(s.db); stale > 0 {
		t.Errorf("%d tables still hold deletes after Compact", stale)
	}
	for i, r := range refs {
		_, err := s.Get(ctx, r)
		switch {
		case i < 250 && !errors.Is(err, cas.ErrNotFound):
			t.Fatalf("deleted chunk %s after Compact: %v", r.Short(), err)
		case i >= 250 && err != nil:
			t.Fatalf("live chunk %s after Compact: %v", r.Short(), err)
		}
	}
}
