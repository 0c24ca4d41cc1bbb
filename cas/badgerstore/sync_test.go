package badgerstore

import (
	"context"
	"testing"

	"github.com/homefs/homefs/cas"
)

// A Sync reaches the files when a write ended since the last one began,
// and only then.
func TestSyncOnlyAfterWrites(t *testing.T) {
	ctx := context.Background()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	syncs := func() uint64 {
		s.syncMu.Lock()
		defer s.syncMu.Unlock()
		return s.syncs
	}
	var ref cas.Ref
	for _, step := range []struct {
		name  string
		do    func() error
		syncs uint64 // after do and a Sync
	}{
		{"the first Sync since open", func() error { return nil }, 1},
		{"nothing written", func() error { return nil }, 1},
		{"a put", func() error { ref, err = s.Put(ctx, []byte("a")); return err }, 2},
		{"a put of a chunk present", func() error { _, err := s.Put(ctx, []byte("a")); return err }, 2},
		{"a durable commit, which syncs", func() error {
			return s.Commit(ctx, []cas.NameOp{{Name: "heads/a", Value: []byte("1")}}, true)
		}, 3},
		{"a commit", func() error { return s.Commit(ctx, []cas.NameOp{{Name: "heads/a", Value: []byte("2")}}, false) }, 4},
		{"a batch", func() error {
			b := s.NewBatch()
			if _, err := b.Put([]byte("b")); err != nil {
				return err
			}
			return b.Commit(ctx, false)
		}, 5},
		{"a durable batch, which syncs", func() error {
			b := s.NewBatch()
			if _, err := b.Put([]byte("c")); err != nil {
				return err
			}
			return b.Commit(ctx, true)
		}, 6},
		{"a delete", func() error { return s.Delete(ctx, ref) }, 7},
		{"a compaction", func() error { _, err := s.Compact(ctx); return err }, 8},
		{"nothing written again", func() error { return nil }, 8},
	} {
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if err := s.Sync(ctx); err != nil {
			t.Fatalf("%s: Sync: %v", step.name, err)
		}
		if got := syncs(); got != step.syncs {
			t.Errorf("%s: %d syncs, want %d", step.name, got, step.syncs)
		}
	}
}
