package badgerstore_test

import (
	"bytes"
	"context"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
)

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// filesHolding returns the files under dir that contain needle.
func filesHolding(t *testing.T, dir string, needle []byte) []string {
	t.Helper()
	var hits []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, needle) {
			hits = append(hits, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hits
}

// TestCompactErasesDeleted: after Delete and Compact, no byte of a deleted
// chunk is left in any of the store's files, even when the chunk was in
// the value log file Badger was appending to, and the space is given back.
func TestCompactErasesDeleted(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := badgerstore.Open(dir, badgerstore.Options{ValueLogFileSize: 17 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rng := rand.New(rand.NewPCG(3, 4))
	var live []cas.Ref
	for i := 0; i < 300; i++ { // spans two value log files
		r, err := s.Put(ctx, randomBytes(rng, 64<<10))
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, r)
	}
	marker := randomBytes(rng, 256<<10)
	var markerRefs []cas.Ref
	for off := 0; off < len(marker); off += 64 << 10 {
		r, err := s.Put(ctx, marker[off:off+64<<10])
		if err != nil {
			t.Fatal(err)
		}
		markerRefs = append(markerRefs, r)
	}
	// Most of the store goes too, so that the space given back shows.
	if err := s.Delete(ctx, live[:250]...); err != nil {
		t.Fatal(err)
	}
	live = live[250:]
	if err := s.Delete(ctx, markerRefs...); err != nil {
		t.Fatal(err)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	needle := marker[100<<10 : 100<<10+64]
	if hits := filesHolding(t, dir, needle); len(hits) == 0 {
		t.Fatal("the marker is not in the store's files before Compact: the test proves nothing")
	}
	res, err := s.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compact: %+v", res)
	if hits := filesHolding(t, dir, needle); len(hits) > 0 {
		t.Fatalf("deleted bytes still in %v after Compact", hits)
	}
	if res.BytesAfter >= res.BytesBefore/2 {
		t.Errorf("store files %d bytes after Compact, %d before: most of it was deleted", res.BytesAfter, res.BytesBefore)
	}
	for _, r := range live {
		b, err := s.Get(ctx, r)
		if err != nil || cas.Sum(b) != r {
			t.Fatalf("live chunk %s after Compact: %v", r.Short(), err)
		}
	}
}

// TestCompactConcurrent: reads, puts, batches and name commits running
// while Compact reopens the database all succeed.
func TestCompactConcurrent(t *testing.T) {
	ctx := context.Background()
	s, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	rng := rand.New(rand.NewPCG(5, 6))
	base, err := s.Put(ctx, randomBytes(rng, 64<<10))
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var g errgroup.Group
	for w := 0; w < 3; w++ {
		g.Go(func() error {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for i := 0; ; i++ {
				select {
				case <-stop:
					return nil
				default:
				}
				if _, err := s.Get(ctx, base); err != nil {
					return err
				}
				b := s.NewBatch()
				ref, err := b.Put(randomBytes(r, 4<<10))
				if err == nil {
					err = b.Commit(ctx, i%4 == 0)
				}
				if err == nil {
					_, err = s.Get(ctx, ref)
				}
				if err == nil {
					err = s.Commit(ctx, []cas.NameOp{{Name: "w", Value: []byte{byte(i)}}}, false)
				}
				if err != nil {
					return err
				}
			}
		})
	}
	for i := 0; i < 3; i++ {
		junk, err := s.Put(ctx, randomBytes(rng, 64<<10))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Delete(ctx, junk); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Compact(ctx); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	if err := g.Wait(); err != nil {
		t.Error(err)
	}
}
