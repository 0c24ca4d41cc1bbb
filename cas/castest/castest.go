// Package castest is the conformance suite every cas.Store implementation
// runs, and helpers for tests that need a store.
package castest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"golang.org/x/sync/errgroup"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/internal/gen"
)

// Run runs the conformance suite. open must return a new, empty store for
// each call; the suite closes it (Close must tolerate a second call, for
// example from t.Cleanup in open).
func Run(t *testing.T, open func(t *testing.T) cas.Store) {
	tests := []struct {
		name string
		fn   func(*testing.T, cas.Store)
	}{
		{"RoundTrip", testRoundTrip},
		{"IdempotentPut", testIdempotentPut},
		{"TooLarge", testTooLarge},
		{"NotFound", testNotFound},
		{"Corrupt", testCorrupt},
		{"HasMany", testHasMany},
		{"Enumerate", testEnumerate},
		{"Delete", testDelete},
		{"BatchCommit", testBatchCommit},
		{"BatchDiscard", testBatchDiscard},
		{"Names", testNames},
		{"NamesExpect", testNamesExpect},
		{"NamesAtomic", testNamesAtomic},
		{"NamesInvalid", testNamesInvalid},
		{"NamesList", testNamesList},
		{"Canceled", testCanceled},
		{"Concurrent", testConcurrent},
		{"ConcurrentCommit", testConcurrentCommit},
		{"Closed", testClosed},
		{"Compact", testCompact},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			defer s.Close()
			tt.fn(t, s)
		})
	}
}

// Samples returns named test payloads: empty, small, 4 KiB and 1 MiB,
// compressible JSONL and random, from a fixed seed.
func Samples() []Sample {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	return []Sample{
		{"empty", []byte{}},
		{"small", []byte("hello, homefs")},
		{"random-4K", random(4 << 10)},
		{"jsonl-4K", JSONL(4<<10, 1)},
		{"random-1M", random(1 << 20)},
		{"jsonl-1M", JSONL(1<<20, 2)},
		{"zeros-64K", make([]byte, 64<<10)},
	}
}

// Sample is a named payload.
type Sample struct {
	Name string
	Data []byte
}

// JSONL returns n bytes of agent-rollout-like JSON lines generated from
// seed: the kind of content homefs mostly stores.
func JSONL(n int, seed uint64) []byte { return gen.JSONL(n, seed) }

func mustPut(t *testing.T, s cas.Putter, data []byte) cas.Ref {
	t.Helper()
	ref, err := s.Put(context.Background(), data)
	if err != nil {
		t.Fatalf("Put(%d bytes): %v", len(data), err)
	}
	return ref
}

func testRoundTrip(t *testing.T, s cas.Store) {
	ctx := context.Background()
	for _, sm := range Samples() {
		ref := mustPut(t, s, sm.Data)
		if want := cas.Sum(sm.Data); ref != want {
			t.Errorf("%s: Put returned %s, want Sum %s", sm.Name, ref.Short(), want.Short())
		}
		got, err := s.Get(ctx, ref)
		if err != nil {
			t.Fatalf("%s: Get: %v", sm.Name, err)
		}
		if !bytes.Equal(got, sm.Data) {
			t.Fatalf("%s: Get returned %d bytes that differ from the %d put", sm.Name, len(got), len(sm.Data))
		}
		// The returned slice belongs to the caller.
		if len(got) > 0 {
			got[0] ^= 0xff
			again, err := s.Get(ctx, ref)
			if err != nil || !bytes.Equal(again, sm.Data) {
				t.Fatalf("%s: changing a returned slice changed the store (err %v)", sm.Name, err)
			}
		}
	}
	// Put must not keep the caller's slice.
	data := []byte("mutable caller buffer, long enough to be worth compressing maybe, maybe not")
	orig := bytes.Clone(data)
	ref := mustPut(t, s, data)
	data[0] = 'X'
	if got, err := s.Get(ctx, ref); err != nil || !bytes.Equal(got, orig) {
		t.Fatalf("store kept the caller's slice: %q, %v", got, err)
	}
}

func testIdempotentPut(t *testing.T, s cas.Store) {
	ctx := context.Background()
	data := JSONL(10000, 7)
	r1 := mustPut(t, s, data)
	r2 := mustPut(t, s, bytes.Clone(data))
	if r1 != r2 {
		t.Fatalf("second Put returned %s, first %s", r2.Short(), r1.Short())
	}
	n := 0
	if err := s.Enumerate(ctx, func(cas.ChunkInfo) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("Enumerate after two equal puts saw %d chunks, want 1", n)
	}
}

func testTooLarge(t *testing.T, s cas.Store) {
	_, err := s.Put(context.Background(), make([]byte, cas.MaxChunkSize+1))
	if !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("Put over MaxChunkSize: %v, want ErrTooLarge", err)
	}
	if _, err := s.NewBatch().Put(make([]byte, cas.MaxChunkSize+1)); !errors.Is(err, cas.ErrTooLarge) {
		t.Fatalf("Batch.Put over MaxChunkSize: %v, want ErrTooLarge", err)
	}
}

func testNotFound(t *testing.T, s cas.Store) {
	ctx := context.Background()
	for _, ref := range []cas.Ref{cas.Sum([]byte("absent")), {}} {
		if _, err := s.Get(ctx, ref); !errors.Is(err, cas.ErrNotFound) {
			t.Errorf("Get(%s): %v, want ErrNotFound", ref.Short(), err)
		}
	}
	if _, err := s.GetName(ctx, "absent"); !errors.Is(err, cas.ErrNotFound) {
		t.Errorf("GetName(absent): %v, want ErrNotFound", err)
	}
}

func testCorrupt(t *testing.T, s cas.Store) {
	c, ok := s.(cas.Corrupter)
	if !ok {
		t.Skip("store has no CorruptForTest")
	}
	ctx := context.Background()
	for _, sm := range Samples() {
		ref := mustPut(t, s, sm.Data)
		if err := c.CorruptForTest(ref); err != nil {
			t.Fatalf("%s: CorruptForTest: %v", sm.Name, err)
		}
		got, err := s.Get(ctx, ref)
		if !errors.Is(err, cas.ErrCorrupt) {
			t.Fatalf("%s: Get of a corrupted chunk: %v, want ErrCorrupt", sm.Name, err)
		}
		if got != nil {
			t.Fatalf("%s: Get of a corrupted chunk returned %d bytes", sm.Name, len(got))
		}
		// Putting the content again repairs it.
		if r := mustPut(t, s, sm.Data); r != ref {
			t.Fatalf("%s: repair Put returned another ref", sm.Name)
		}
		if got, err := s.Get(ctx, ref); err != nil || !bytes.Equal(got, sm.Data) {
			t.Fatalf("%s: Get after repair: %v", sm.Name, err)
		}
	}
	if err := c.CorruptForTest(cas.Sum([]byte("absent"))); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("CorruptForTest(absent): %v, want ErrNotFound", err)
	}
}

func testHasMany(t *testing.T, s cas.Store) {
	a := mustPut(t, s, []byte("a"))
	c := mustPut(t, s, []byte("c"))
	b := cas.Sum([]byte("b"))
	got, err := s.HasMany(context.Background(), []cas.Ref{a, b, c, a, {}})
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, true, true, false}; !slices.Equal(got, want) {
		t.Fatalf("HasMany = %v, want %v", got, want)
	}
	if got, err := s.HasMany(context.Background(), nil); err != nil || len(got) != 0 {
		t.Fatalf("HasMany(nil) = %v, %v", got, err)
	}
}

func testEnumerate(t *testing.T, s cas.Store) {
	ctx := context.Background()
	want := map[cas.Ref]int64{}
	for _, sm := range Samples() {
		want[mustPut(t, s, sm.Data)] = int64(len(sm.Data))
	}
	for i := range 3000 { // more than one page
		d := []byte(fmt.Sprintf("chunk %d", i))
		want[mustPut(t, s, d)] = int64(len(d))
	}
	if err := s.Commit(ctx, []cas.NameOp{{Name: "not-a-chunk", Value: []byte("x")}}, false); err != nil {
		t.Fatal(err)
	}
	var seen []cas.Ref
	err := s.Enumerate(ctx, func(ci cas.ChunkInfo) error {
		seen = append(seen, ci.Ref)
		size, ok := want[ci.Ref]
		if !ok {
			return fmt.Errorf("unexpected chunk %s", ci.Ref.Short())
		}
		if ci.Size != size {
			return fmt.Errorf("chunk %s: Size %d, want %d", ci.Ref.Short(), ci.Size, size)
		}
		if ci.StoredSize < 0 || ci.StoredSize > size+16 || size > 0 && ci.StoredSize == 0 {
			return fmt.Errorf("chunk %s: StoredSize %d for %d plain bytes", ci.Ref.Short(), ci.StoredSize, size)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(want) {
		t.Fatalf("Enumerate saw %d chunks, want %d", len(seen), len(want))
	}
	if !slices.IsSortedFunc(seen, func(a, b cas.Ref) int { return bytes.Compare(a[:], b[:]) }) {
		t.Fatal("Enumerate not in ref order")
	}
	// An error from fn stops the walk and comes back.
	stop := errors.New("stop")
	n := 0
	if err := s.Enumerate(ctx, func(cas.ChunkInfo) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Fatalf("Enumerate with failing fn: %v after %d calls", err, n)
	}
}

func testDelete(t *testing.T, s cas.Store) {
	ctx := context.Background()
	a := mustPut(t, s, []byte("a"))
	b := mustPut(t, s, []byte("b"))
	if err := s.Delete(ctx, a, cas.Sum([]byte("absent"))); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, a); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, b); err != nil {
		t.Fatalf("Delete removed another chunk: %v", err)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatalf("Delete(): %v", err)
	}
	// Put after delete stores again (no stale dedup).
	mustPut(t, s, []byte("a"))
	if _, err := s.Get(ctx, a); err != nil {
		t.Fatalf("Get after re-Put: %v", err)
	}
}

func testBatchCommit(t *testing.T, s cas.Store) {
	ctx := context.Background()
	existing := mustPut(t, s, []byte("already there"))
	b := s.NewBatch()
	var refs []cas.Ref
	for _, sm := range Samples() {
		r, err := b.Put(sm.Data)
		if err != nil {
			t.Fatal(err)
		}
		if r != cas.Sum(sm.Data) {
			t.Fatal("Batch.Put returned a ref other than Sum")
		}
		refs = append(refs, r)
	}
	if _, err := b.Put([]byte("already there")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Put([]byte("small")); err != nil { // twice in one batch
		t.Fatal(err)
	}
	if _, err := b.Put([]byte("small")); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx, true); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	for i, sm := range Samples() {
		got, err := s.Get(ctx, refs[i])
		if err != nil || !bytes.Equal(got, sm.Data) {
			t.Fatalf("%s after batch commit: %v", sm.Name, err)
		}
	}
	if _, err := s.Get(ctx, existing); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx, false); err == nil {
		t.Fatal("second Commit succeeded")
	}
	if _, err := b.Put([]byte("late")); err == nil {
		t.Fatal("Put after Commit succeeded")
	}
	b.Discard() // harmless after Commit
	// An empty durable batch is a Sync.
	if err := s.NewBatch().Commit(ctx, true); err != nil {
		t.Fatal(err)
	}
}

func testBatchDiscard(t *testing.T, s cas.Store) {
	ctx := context.Background()
	b := s.NewBatch()
	r, err := b.Put([]byte("discarded"))
	if err != nil {
		t.Fatal(err)
	}
	b.Discard()
	if _, err := s.Get(ctx, r); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("Get after Discard: %v, want ErrNotFound", err)
	}
	if err := b.Commit(ctx, false); err == nil {
		t.Fatal("Commit after Discard succeeded")
	}
	b.Discard()
}

func testNames(t *testing.T, s cas.Store) {
	ctx := context.Background()
	if err := s.Commit(ctx, []cas.NameOp{
		{Name: "heads/a", Value: []byte("1")},
		{Name: "heads/empty", Value: []byte{}},
	}, true); err != nil {
		t.Fatal(err)
	}
	if v, err := s.GetName(ctx, "heads/a"); err != nil || string(v) != "1" {
		t.Fatalf("GetName = %q, %v", v, err)
	}
	v, err := s.GetName(ctx, "heads/empty")
	if err != nil || v == nil || len(v) != 0 {
		t.Fatalf("GetName(empty value) = %#v, %v; want non-nil empty", v, err)
	}
	big := bytes.Repeat([]byte{'v'}, cas.MaxNameValueSize)
	if err := s.Commit(ctx, []cas.NameOp{{Name: "heads/a", Value: big}}, false); err != nil {
		t.Fatalf("Commit of a max-size value: %v", err)
	}
	if v, err := s.GetName(ctx, "heads/a"); err != nil || !bytes.Equal(v, big) {
		t.Fatalf("GetName of a max-size value: %d bytes, %v", len(v), err)
	}
	if err := s.Commit(ctx, []cas.NameOp{{Name: "heads/a"}}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetName(ctx, "heads/a"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("GetName after delete: %v", err)
	}
	// Deleting an absent name is not an error; an empty commit is fine.
	if err := s.Commit(ctx, []cas.NameOp{{Name: "never"}}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(ctx, nil, true); err != nil {
		t.Fatal(err)
	}
	// Names and chunks are separate namespaces.
	if _, err := s.Get(ctx, cas.Sum([]byte("1"))); !errors.Is(err, cas.ErrNotFound) {
		t.Fatal("a name value is visible as a chunk")
	}
}

func testNamesExpect(t *testing.T, s cas.Store) {
	ctx := context.Background()
	commit := func(ops ...cas.NameOp) error { return s.Commit(ctx, ops, false) }
	if err := commit(cas.NameOp{Name: "h", Value: []byte("v1"), Expect: cas.ExpectAbsent()}); err != nil {
		t.Fatalf("create with ExpectAbsent: %v", err)
	}
	if err := commit(cas.NameOp{Name: "h", Value: []byte("v2"), Expect: cas.ExpectAbsent()}); !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("ExpectAbsent on an existing name: %v, want ErrConflict", err)
	}
	if err := commit(cas.NameOp{Name: "h", Value: []byte("v2"), Expect: cas.Expect([]byte("v0"))}); !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("Expect mismatch: %v, want ErrConflict", err)
	}
	if err := commit(cas.NameOp{Name: "h", Value: []byte("v2"), Expect: cas.Expect([]byte("v1"))}); err != nil {
		t.Fatalf("Expect match: %v", err)
	}
	if err := commit(cas.NameOp{Name: "other", Value: []byte("x"), Expect: cas.Expect([]byte("x"))}); !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("Expect a value on an absent name: %v, want ErrConflict", err)
	}
	if err := commit(cas.NameOp{Name: "e", Value: []byte{}}); err != nil {
		t.Fatal(err)
	}
	if err := commit(cas.NameOp{Name: "e", Value: []byte("y"), Expect: cas.ExpectAbsent()}); !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("ExpectAbsent on an empty value: %v, want ErrConflict", err)
	}
	if err := commit(cas.NameOp{Name: "e", Value: []byte("y"), Expect: cas.Expect([]byte{})}); err != nil {
		t.Fatalf("Expect empty on an empty value: %v", err)
	}
	// Expect-only op with a delete: compare-and-delete.
	if err := commit(cas.NameOp{Name: "h", Expect: cas.Expect([]byte("v2"))}); err != nil {
		t.Fatal(err)
	}
	// Ops apply in order: an Expect sees the earlier op of the same commit.
	if err := commit(
		cas.NameOp{Name: "seq", Value: []byte("1"), Expect: cas.ExpectAbsent()},
		cas.NameOp{Name: "seq", Value: []byte("2"), Expect: cas.Expect([]byte("1"))},
	); err != nil {
		t.Fatalf("sequential ops: %v", err)
	}
	if v, _ := s.GetName(ctx, "seq"); string(v) != "2" {
		t.Fatalf("seq = %q, want 2", v)
	}
}

func testNamesAtomic(t *testing.T, s cas.Store) {
	ctx := context.Background()
	if err := s.Commit(ctx, []cas.NameOp{{Name: "a", Value: []byte("a0")}, {Name: "b", Value: []byte("b0")}}, false); err != nil {
		t.Fatal(err)
	}
	err := s.Commit(ctx, []cas.NameOp{
		{Name: "a", Value: []byte("a1")},
		{Name: "new", Value: []byte("n")},
		{Name: "b"},
		{Name: "b", Value: []byte("b1"), Expect: cas.Expect([]byte("b0"))}, // fails: b was just deleted
	}, true)
	if !errors.Is(err, cas.ErrConflict) {
		t.Fatalf("commit with a failing Expect: %v, want ErrConflict", err)
	}
	for name, want := range map[string]string{"a": "a0", "b": "b0"} {
		if v, err := s.GetName(ctx, name); err != nil || string(v) != want {
			t.Fatalf("after failed commit %s = %q, %v; want %q", name, v, err, want)
		}
	}
	if _, err := s.GetName(ctx, "new"); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("failed commit created a name: %v", err)
	}
	// An invalid op fails the whole commit before anything is applied.
	err = s.Commit(ctx, []cas.NameOp{{Name: "a", Value: []byte("a2")}, {Name: "bad\x00", Value: []byte("x")}}, false)
	if !errors.Is(err, cas.ErrInvalidName) {
		t.Fatalf("commit with an invalid name: %v, want ErrInvalidName", err)
	}
	if v, _ := s.GetName(ctx, "a"); string(v) != "a0" {
		t.Fatalf("invalid commit applied an op: a = %q", v)
	}
}

func testNamesInvalid(t *testing.T, s cas.Store) {
	ctx := context.Background()
	long := string(bytes.Repeat([]byte{'n'}, cas.MaxNameLen))
	for _, name := range []string{"", "a\x00b", "tab\there", "new\nline", "\xff\xfe", long + "x"} {
		if err := s.Commit(ctx, []cas.NameOp{{Name: name, Value: []byte("x")}}, false); !errors.Is(err, cas.ErrInvalidName) {
			t.Errorf("Commit(%q): %v, want ErrInvalidName", name, err)
		}
		if _, err := s.GetName(ctx, name); !errors.Is(err, cas.ErrInvalidName) {
			t.Errorf("GetName(%q): %v, want ErrInvalidName", name, err)
		}
	}
	if err := s.Commit(ctx, []cas.NameOp{{Name: long, Value: []byte("ok")}, {Name: "snapshots/ü é/2025", Value: []byte("ok")}}, false); err != nil {
		t.Errorf("valid names: %v", err)
	}
	err := s.Commit(ctx, []cas.NameOp{{Name: "big", Value: make([]byte, cas.MaxNameValueSize+1)}}, false)
	if !errors.Is(err, cas.ErrTooLarge) {
		t.Errorf("value over MaxNameValueSize: %v, want ErrTooLarge", err)
	}
}

func testNamesList(t *testing.T, s cas.Store) {
	ctx := context.Background()
	var ops []cas.NameOp
	var want []string
	for i := range 1500 { // more than one page
		n := fmt.Sprintf("sessions/%04d/head", i)
		ops = append(ops, cas.NameOp{Name: n, Value: []byte(n)})
		want = append(want, n)
	}
	ops = append(ops, cas.NameOp{Name: "sessions", Value: []byte("x")}, cas.NameOp{Name: "sessionsX/1", Value: []byte("x")},
		cas.NameOp{Name: "a", Value: []byte("x")}, cas.NameOp{Name: "z", Value: []byte("x")})
	for i := 0; i < len(ops); i += 100 {
		if err := s.Commit(ctx, ops[i:min(i+100, len(ops))], false); err != nil {
			t.Fatal(err)
		}
	}
	mustPut(t, s, []byte("a chunk is not a name"))
	var got []string
	err := s.ListNames(ctx, "sessions/", func(name string, value []byte) error {
		if string(value) != name {
			return fmt.Errorf("%s = %q", name, value)
		}
		got = append(got, name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ListNames(sessions/) gave %d names, want %d in order", len(got), len(want))
	}
	var all []string
	if err := s.ListNames(ctx, "", func(name string, _ []byte) error { all = append(all, name); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(all) != len(ops) || !slices.IsSorted(all) || all[0] != "a" || all[len(all)-1] != "z" {
		t.Fatalf("ListNames(\"\") gave %d names (sorted %v), want %d", len(all), slices.IsSorted(all), len(ops))
	}
	// fn may call the store.
	err = s.ListNames(ctx, "sessions/000", func(name string, _ []byte) error {
		_, err := s.GetName(ctx, name)
		return err
	})
	if err != nil {
		t.Fatalf("GetName inside ListNames: %v", err)
	}
}

func testCanceled(t *testing.T, s cas.Store) {
	ref := mustPut(t, s, []byte("x"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s with a canceled context: %v, want context.Canceled", op, err)
		}
	}
	callEvery(ctx, s, ref, check)
	b := s.NewBatch()
	if _, err := b.Put([]byte("z")); err != nil {
		t.Fatal(err)
	}
	check("Batch.Commit", b.Commit(ctx, false))
	// Nothing above took effect.
	if _, err := s.Get(context.Background(), ref); err != nil {
		t.Errorf("canceled Delete deleted: %v", err)
	}
	if _, err := s.GetName(context.Background(), "n"); !errors.Is(err, cas.ErrNotFound) {
		t.Errorf("canceled Commit committed: %v", err)
	}
	// Cancellation during a walk stops it.
	ctx2, cancel2 := context.WithCancel(context.Background())
	for i := range 2100 {
		mustPut(t, s, []byte(fmt.Sprint(i)))
	}
	n := 0
	err := s.Enumerate(ctx2, func(cas.ChunkInfo) error {
		n++
		cancel2()
		return nil
	})
	check("Enumerate canceled midway", err)
	if n > 1100 {
		t.Errorf("Enumerate went on for %d chunks after cancel", n)
	}
}

func testConcurrent(t *testing.T, s cas.Store) {
	ctx := context.Background()
	const workers, per = 8, 40
	var g errgroup.Group
	for w := range workers {
		g.Go(func() error {
			for i := range per {
				// Overlapping content across workers exercises dedup races.
				data := JSONL(2000+i*50, uint64(i%(per/2)))
				if w%2 == 1 {
					data = append(data, byte(w))
				}
				ref, err := s.Put(ctx, data)
				if err != nil {
					return err
				}
				got, err := s.Get(ctx, ref)
				if err != nil || !bytes.Equal(got, data) {
					return fmt.Errorf("worker %d: Get after Put: %v", w, err)
				}
				if i%10 == 0 {
					if err := s.Sync(ctx); err != nil {
						return err
					}
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
}

// testConcurrentCommit: compare-and-set increments from many goroutines
// lose no update.
func testConcurrentCommit(t *testing.T, s cas.Store) {
	ctx := context.Background()
	if err := s.Commit(ctx, []cas.NameOp{{Name: "counter", Value: []byte("0")}}, false); err != nil {
		t.Fatal(err)
	}
	const workers, per = 4, 25
	var g errgroup.Group
	for range workers {
		g.Go(func() error {
			for i := 0; i < per; {
				cur, err := s.GetName(ctx, "counter")
				if err != nil {
					return err
				}
				var n int
				fmt.Sscan(string(cur), &n)
				err = s.Commit(ctx, []cas.NameOp{{Name: "counter", Value: []byte(fmt.Sprint(n + 1)), Expect: cas.Expect(cur)}}, false)
				switch {
				case errors.Is(err, cas.ErrConflict):
					continue
				case err != nil:
					return err
				}
				i++
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if v, _ := s.GetName(ctx, "counter"); string(v) != fmt.Sprint(workers*per) {
		t.Fatalf("counter = %s, want %d", v, workers*per)
	}
}

func testClosed(t *testing.T, s cas.Store) {
	ctx := context.Background()
	ref := mustPut(t, s, []byte("x"))
	b := s.NewBatch()
	if _, err := b.Put([]byte("pending")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	check := func(op string, err error) {
		t.Helper()
		if !errors.Is(err, cas.ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", op, err)
		}
	}
	callEvery(ctx, s, ref, check)
	if err := b.Commit(ctx, false); err == nil {
		t.Error("Batch.Commit after Close succeeded")
	}
	_, err := s.NewBatch().Put([]byte("z"))
	if err == nil {
		t.Error("Put in a batch started after Close succeeded")
	}
	if c, ok := s.(cas.Corrupter); ok {
		check("CorruptForTest", c.CorruptForTest(ref))
	}
}

// callEvery calls every method of s once with ctx and hands each error to
// check, named by the method.
func callEvery(ctx context.Context, s cas.Store, ref cas.Ref, check func(op string, err error)) {
	_, err := s.Get(ctx, ref)
	check("Get", err)
	_, err = s.Put(ctx, []byte("y"))
	check("Put", err)
	_, err = s.HasMany(ctx, []cas.Ref{ref})
	check("HasMany", err)
	check("Enumerate", s.Enumerate(ctx, func(cas.ChunkInfo) error { return nil }))
	check("Delete", s.Delete(ctx, ref))
	check("Sync", s.Sync(ctx))
	_, err = s.GetName(ctx, "n")
	check("GetName", err)
	check("ListNames", s.ListNames(ctx, "", func(string, []byte) error { return nil }))
	check("Commit", s.Commit(ctx, []cas.NameOp{{Name: "n", Value: []byte("v")}}, false))
}

// testCompact: a compaction keeps every live chunk, name and open batch,
// and deleted chunks stay deleted. Stores that are not Compactors skip it.
func testCompact(t *testing.T, s cas.Store) {
	c, ok := s.(cas.Compactor)
	if !ok {
		t.Skip("store is not a cas.Compactor")
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 8))
	random := func() []byte {
		b := make([]byte, 64<<10)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	var keep, drop []cas.Ref
	for i := 0; i < 6; i++ {
		r := mustPut(t, s, random())
		if i%2 == 0 {
			keep = append(keep, r)
		} else {
			drop = append(drop, r)
		}
	}
	if err := s.Commit(ctx, []cas.NameOp{{Name: "session/a", Value: []byte("head")}}, true); err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	before, err := b.Put(random())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, drop...); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	after, err := b.Put(random())
	if err != nil {
		t.Fatalf("batch Put after Compact: %v", err)
	}
	if err := b.Commit(ctx, true); err != nil {
		t.Fatalf("batch Commit after Compact: %v", err)
	}
	if _, err := c.Compact(ctx); err != nil {
		t.Fatalf("second Compact: %v", err)
	}
	for _, r := range append(keep, before, after) {
		data, err := s.Get(ctx, r)
		if err != nil {
			t.Fatalf("Get %s after Compact: %v", r.Short(), err)
		}
		if cas.Sum(data) != r {
			t.Fatalf("Get %s after Compact: wrong bytes", r.Short())
		}
	}
	for _, r := range drop {
		if _, err := s.Get(ctx, r); !errors.Is(err, cas.ErrNotFound) {
			t.Fatalf("Get of deleted %s after Compact: %v, want ErrNotFound", r.Short(), err)
		}
	}
	v, err := s.GetName(ctx, "session/a")
	if err != nil || string(v) != "head" {
		t.Fatalf("GetName after Compact: %q, %v", v, err)
	}
	mustPut(t, s, []byte("still writable"))
}
