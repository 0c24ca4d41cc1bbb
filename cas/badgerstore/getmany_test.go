package badgerstore_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
)

// GetMany gives what Get gives for each ref: a damaged chunk verified in
// a pair (first or second) is ErrCorrupt and its bytes are never returned,
// its partner is served; an absent one is ErrNotFound. GetManyInto gives
// the same, each chunk in its buffer.
func TestBadgerGetMany(t *testing.T) {
	for _, into := range []bool{false, true} {
		testBadgerGetMany(t, into)
	}
}

func testBadgerGetMany(t *testing.T, into bool) {
	ctx := context.Background()
	s, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	chunk := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	plain := [][]byte{chunk(64 << 10), chunk(64 << 10), chunk(64 << 10), chunk(64 << 10), nil, chunk(1000)}
	refs := make([]cas.Ref, len(plain))
	for i, p := range plain {
		if p == nil {
			refs[i] = cas.Sum([]byte("never stored"))
			continue
		}
		if refs[i], err = s.Put(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	// The second of the first pair, the first of the second.
	damaged := map[int]bool{1: true, 2: true}
	const absent = 4
	for i := range damaged {
		if err := s.CorruptForTest(refs[i]); err != nil {
			t.Fatal(err)
		}
	}
	var (
		data [][]byte
		errs []error
		bufs = make([][]byte, len(refs))
	)
	for i := range bufs {
		bufs[i] = make([]byte, 64<<10)
	}
	if into {
		data, errs = cas.GetManyInto(ctx, s, refs, bufs)
	} else {
		data, errs = cas.GetMany(ctx, s, refs)
	}
	for i := range refs {
		if into && errs[i] == nil && len(data[i]) > 0 && &data[i][0] != &bufs[i][0] {
			t.Errorf("chunk %d: not decoded into its buffer", i)
		}
		switch {
		case damaged[i]:
			if !errors.Is(errs[i], cas.ErrCorrupt) || data[i] != nil {
				t.Errorf("damaged chunk: %d bytes, err %v; want none and ErrCorrupt", len(data[i]), errs[i])
			}
		case i == absent:
			if !errors.Is(errs[i], cas.ErrNotFound) {
				t.Errorf("absent chunk: err %v, want ErrNotFound", errs[i])
			}
		default:
			if errs[i] != nil || string(data[i]) != string(plain[i]) {
				t.Errorf("chunk %d: %d bytes, err %v; want its %d bytes", i, len(data[i]), errs[i], len(plain[i]))
			}
		}
	}
}
