package manifest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
)

// benchName gives names that sort in index order.
func benchName(i int) string { return fmt.Sprintf("file-%07d.txt", i) }

// benchTree is a directory of n small files, one or two chunks each, with
// a few subdirectories and symlinks mixed in.
func benchTree(n int) *Tree {
	t := &Tree{Entries: make([]Entry, n)}
	for i := range t.Entries {
		e := fileEntry(benchName(i), int64(1000+i%(2*ChunkSize)))
		e.MtimeNs += int64(i) * 1e9
		switch i % 50 {
		case 7:
			e = Entry{Name: e.Name, Kind: KindDir, Mode: 0o755, MtimeNs: e.MtimeNs, CtimeNs: e.CtimeNs, Tree: fakeRef("dir %d", i)}
		case 13:
			e = Entry{Name: e.Name, Kind: KindSymlink, Mode: 0o777, MtimeNs: e.MtimeNs, CtimeNs: e.CtimeNs, Target: "../target/" + e.Name}
			e.Size = int64(len(e.Target))
		}
		t.Entries[i] = e
	}
	return t
}

func BenchmarkEncodeTree100k(b *testing.B) {
	t := benchTree(100_000)
	enc, err := EncodeTree(t)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeTree(t); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeTree100k(b *testing.B) {
	enc, err := EncodeTree(benchTree(100_000))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeTree(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// nestedFiles lays out n files in directories of `fanout` subdirectories,
// `fanout` files per leaf directory, as deep as needed. It returns the
// files and the path of the last (deepest) one.
func nestedFiles(n, fanout int) (map[string]Entry, string) {
	files := make(map[string]Entry, n)
	depth := 0
	for c := fanout; c < n; c *= fanout {
		depth++
	}
	var last string
	for i := range n {
		var p strings.Builder
		for d, v := depth, i/fanout; d > 0; d-- {
			div := 1
			for range d - 1 {
				div *= fanout
			}
			fmt.Fprintf(&p, "d%02d/", v/div%fanout)
		}
		fmt.Fprintf(&p, "f%02d.txt", i%fanout)
		last = p.String()
		files[last] = fileEntry(last, int64(100+i%5000))
	}
	return files, last
}

// captureOne re-stores the path from root to the file at p after changing
// it, as a capture does: read the trees down the path, write them back up.
func captureOne(ctx context.Context, s *countingStore, root cas.Ref, p string, seq int64) (cas.Ref, error) {
	segs := strings.Split(p, "/")
	trees := make([]*Tree, len(segs))
	idx := make([]int, len(segs))
	ref := root
	for d, name := range segs {
		t, err := GetTree(ctx, s, ref)
		if err != nil {
			return cas.Ref{}, err
		}
		i, ok := slices.BinarySearchFunc(t.Entries, name, func(e Entry, n string) int { return strings.Compare(e.Name, n) })
		if !ok {
			return cas.Ref{}, fmt.Errorf("%s: no %q", p, name)
		}
		trees[d], idx[d] = t, i
		ref = t.Entries[i].Tree
	}
	leaf := &trees[len(segs)-1].Entries[idx[len(segs)-1]]
	leaf.MtimeNs = fixedNs + seq
	leaf.Chunks[0] = fakeRef("content %d", seq)
	for d := len(segs) - 1; d >= 0; d-- {
		r, err := PutTree(ctx, s, trees[d])
		if err != nil {
			return cas.Ref{}, err
		}
		if d == 0 {
			return r, nil
		}
		trees[d-1].Entries[idx[d-1]].Tree = r
	}
	panic("unreachable")
}

func BenchmarkCaptureOneChange(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			ctx := context.Background()
			s := newStore()
			files, deep := nestedFiles(n, 10)
			root, err := BuildTree(ctx, s, files)
			if err != nil {
				b.Fatal(err)
			}
			s.resetCounts()
			b.ReportAllocs()
			var seq int64
			for b.Loop() {
				seq++
				if root, err = captureOne(ctx, s, root, deep, seq); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(s.putBytes.Load())/float64(seq), "put-B/op")
			b.ReportMetric(float64(s.getBytes.Load())/float64(seq), "get-B/op")
			b.ReportMetric(float64(s.puts.Load())/float64(seq), "nodes/op")
			b.ReportMetric(float64(strings.Count(deep, "/")+1), "depth")
		})
	}
}

// hashPutter hashes like a store and keeps nothing, so a long benchmark
// does not fill memory.
type hashPutter struct{ puts, bytes int64 }

func (h *hashPutter) Put(_ context.Context, b []byte) (cas.Ref, error) {
	h.puts++
	h.bytes += int64(len(b))
	return cas.Sum(b), nil
}

func oneGiB(b *testing.B) *ChunkList {
	c := NewChunkList()
	for i := range (1 << 30) / ChunkSize {
		c.Set(i, fakeRef("%d", i))
	}
	return c
}

func BenchmarkChunkListStoreAfterAppend(b *testing.B) {
	ctx := context.Background()
	c := oneGiB(b)
	h := &hashPutter{}
	if _, _, _, err := c.Store(ctx, h); err != nil {
		b.Fatal(err)
	}
	*h = hashPutter{}
	ref := fakeRef("appended")
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		n++
		c.Set(c.Len(), ref)
		if _, _, _, err := c.Store(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(h.bytes)/float64(n), "put-B/op")
	b.ReportMetric(float64(h.puts)/float64(n), "nodes/op")
}

// BenchmarkChunkListStoreFull is the cost Store avoids: a 1 GiB file's
// whole index written from scratch.
func BenchmarkChunkListStoreFull(b *testing.B) {
	ctx := context.Background()
	c := oneGiB(b)
	h := &hashPutter{}
	b.ReportAllocs()
	var n int64
	for b.Loop() {
		n++
		c.levels = nil // forget what was stored
		if _, _, _, err := c.Store(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(h.bytes)/float64(n), "put-B/op")
	b.ReportMetric(float64(h.puts)/float64(n), "nodes/op")
}
