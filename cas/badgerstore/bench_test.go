package badgerstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/cas/castest"
	"github.com/homefs/homefs/cas/stored"
)

// Benchmarks run fast at -benchtime=1x (CI smoke); figures in
// docs/BENCHMARKS.md come from -benchtime=200ms or more.

var benchSizes = []int{4 << 10, 64 << 10}

// benchData returns a pool of distinct inputs of one kind and size.
func benchData(kind string, size, count int) [][]byte {
	rng := rand.New(rand.NewPCG(42, uint64(size)))
	pool := make([][]byte, count)
	for i := range pool {
		if kind == "jsonl" {
			pool[i] = castest.JSONL(size, uint64(i))
		} else {
			pool[i] = make([]byte, size)
			for j := 0; j+8 <= size; j += 8 {
				binary.LittleEndian.PutUint64(pool[i][j:], rng.Uint64())
			}
		}
	}
	return pool
}

// unique makes iteration i's data new content (no dedup) at the cost of
// an 8-byte write.
func unique(pool [][]byte, i int) []byte {
	d := pool[i%len(pool)]
	binary.LittleEndian.PutUint64(d, uint64(i))
	return d
}

type benchStore struct {
	name string
	open func(b *testing.B) cas.Store
}

var benchStores = []benchStore{
	{"badger", func(b *testing.B) cas.Store {
		s, err := badgerstore.Open(b.TempDir(), badgerstore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}},
	{"memory", func(b *testing.B) cas.Store { return cas.NewMemory() }},
}

func BenchmarkSHA256(b *testing.B) {
	for _, size := range benchSizes {
		data := benchData("random", size, 1)[0]
		b.Run(fmt.Sprintf("%dK", size>>10), func(b *testing.B) {
			b.SetBytes(int64(size))
			for b.Loop() {
				sha256.Sum256(data)
			}
		})
	}
}

func BenchmarkPut(b *testing.B) {
	ctx := context.Background()
	for _, st := range benchStores {
		for _, kind := range []string{"jsonl", "random"} {
			for _, size := range benchSizes {
				pool := benchData(kind, size, 64)
				b.Run(fmt.Sprintf("%s/%s/%dK", st.name, kind, size>>10), func(b *testing.B) {
					s := st.open(b)
					b.SetBytes(int64(size))
					i := 0
					for b.Loop() {
						if _, err := s.Put(ctx, unique(pool, i)); err != nil {
							b.Fatal(err)
						}
						i++
					}
					b.StopTimer()
					reportStored(b, s, int64(size)*int64(i))
				})
			}
		}
	}
}

// BenchmarkPutParallel shows how Put scales over GOMAXPROCS goroutines.
func BenchmarkPutParallel(b *testing.B) {
	ctx := context.Background()
	for _, st := range benchStores {
		for _, kind := range []string{"jsonl", "random"} {
			const size = 64 << 10
			b.Run(fmt.Sprintf("%s/%s/64K", st.name, kind), func(b *testing.B) {
				s := st.open(b)
				pools := make(chan [][]byte, 4*runtime.GOMAXPROCS(0))
				for range cap(pools) {
					pools <- benchData(kind, size, 8)
				}
				var seed atomic.Uint64
				b.SetBytes(size)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					pool := <-pools // unique mutates, so one pool per goroutine
					rng := rand.New(rand.NewPCG(seed.Add(1), 7))
					for pb.Next() {
						if _, err := s.Put(ctx, unique(pool, int(rng.Uint64()>>1))); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkPutDedup is Put of content already stored.
func BenchmarkPutDedup(b *testing.B) {
	ctx := context.Background()
	for _, st := range benchStores {
		pool := benchData("random", 64<<10, 64)
		b.Run(st.name+"/64K", func(b *testing.B) {
			s := st.open(b)
			for _, d := range pool {
				s.Put(ctx, d)
			}
			b.SetBytes(64 << 10)
			i := 0
			for b.Loop() {
				if _, err := s.Put(ctx, pool[i%len(pool)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	for _, st := range benchStores {
		for _, kind := range []string{"jsonl", "random"} {
			for _, size := range benchSizes {
				pool := benchData(kind, size, 256)
				b.Run(fmt.Sprintf("%s/%s/%dK", st.name, kind, size>>10), func(b *testing.B) {
					s := st.open(b)
					refs := make([]cas.Ref, len(pool))
					for i, d := range pool {
						var err error
						if refs[i], err = s.Put(ctx, d); err != nil {
							b.Fatal(err)
						}
					}
					b.SetBytes(int64(size))
					i := 0
					for b.Loop() {
						if _, err := s.Get(ctx, refs[i%len(refs)]); err != nil {
							b.Fatal(err)
						}
						i++
					}
				})
			}
		}
	}
}

// reportStored reports stored bytes per plain byte put.
func reportStored(b *testing.B, s cas.Store, plain int64) {
	var stored int64
	if err := s.Enumerate(context.Background(), func(ci cas.ChunkInfo) error {
		stored += ci.StoredSize
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	if plain > 0 {
		b.ReportMetric(float64(stored)/float64(plain), "stored/plain")
	}
}

var chunkSizes = []int{16 << 10, 64 << 10, 256 << 10, 1 << 20}

// BenchmarkChunkSize justifies fixed 64 KiB chunks: Put throughput per
// chunk size, and the bytes stored by the two workloads homefs sees.
func BenchmarkChunkSize(b *testing.B) {
	ctx := context.Background()
	for _, cs := range chunkSizes {
		name := fmt.Sprintf("%dK", cs>>10)
		b.Run("put/"+name, func(b *testing.B) {
			// JSONL at the chunk size, into Badger: hashing, compression,
			// and per-chunk overhead of the store.
			pool := benchData("jsonl", cs, max(4, (4<<20)/cs))
			s := benchStores[0].open(b)
			b.SetBytes(int64(cs))
			i := 0
			for b.Loop() {
				if _, err := s.Put(ctx, unique(pool, i)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run("append/"+name, func(b *testing.B) { benchAppend(b, cs) })
		b.Run("randwrite/"+name, func(b *testing.B) { benchRandWrite(b, cs) })
	}
}

// putRange stores file[from:] cut into cs-byte chunks starting at the
// chunk holding offset from, the way the file layer rewrites a file's
// dirty tail.
func putRange(b *testing.B, s cas.Store, file []byte, from, cs int) int64 {
	var plain int64
	for off := from / cs * cs; off < len(file); off += cs {
		chunk := file[off:min(off+cs, len(file))]
		if _, err := s.Put(context.Background(), chunk); err != nil {
			b.Fatal(err)
		}
		plain += int64(len(chunk))
	}
	return plain
}

// storedBytes is what s's chunks take in their stored form, as the disk
// store keeps them (the memory store the workloads run on keeps them
// plain).
func storedBytes(b *testing.B, s cas.Store) int64 {
	ctx := context.Background()
	var n int64
	err := s.Enumerate(ctx, func(ci cas.ChunkInfo) error {
		data, err := s.Get(ctx, ci.Ref)
		if err != nil {
			return err
		}
		v, err := stored.Encode(data)
		n += int64(len(v))
		return err
	})
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// benchAppend: a JSONL rollout grows by 600-byte lines and is flushed
// every 32 lines; each flush rewrites the partial last chunk. Every
// distinct chunk ever put stays stored (no GC), so the sum of stored sizes
// is the bytes written.
func benchAppend(b *testing.B, cs int) {
	const total, line, linesPerFlush = 4 << 20, 600, 32
	src := castest.JSONL(total, 99)
	var stored, plain int64
	for b.Loop() {
		s := cas.NewMemory()
		plain = 0
		flushed := 0
		for end := line * linesPerFlush; ; end += line * linesPerFlush {
			end = min(end, total)
			plain += putRange(b, s, src[:end], flushed, cs)
			flushed = end
			if end == total {
				break
			}
		}
		stored = storedBytes(b, s)
	}
	b.SetBytes(total)
	b.ReportMetric(float64(stored)/total, "stored-B/appended-B")
	b.ReportMetric(float64(plain)/total, "hashed-B/appended-B")
}

// benchRandWrite: 4 KiB writes at random aligned offsets of a 16 MiB
// file, each rewriting its whole chunk.
func benchRandWrite(b *testing.B, cs int) {
	const fileSize, writes, w = 16 << 20, 128, 4 << 10
	file := castest.JSONL(fileSize, 5)
	rng := rand.New(rand.NewPCG(3, 4))
	var amp float64
	for b.Loop() {
		s := cas.NewMemory()
		putRange(b, s, file, 0, cs)
		before := storedBytes(b, s)
		for range writes {
			off := rng.IntN(fileSize/w) * w
			for j := off; j < off+w; j += 8 {
				binary.LittleEndian.PutUint64(file[j:], rng.Uint64())
			}
			start := off / cs * cs
			putRange(b, s, file[:min(start+cs, fileSize)], start, cs)
		}
		amp = float64(storedBytes(b, s)-before) / (writes * w)
	}
	b.SetBytes(writes * w)
	b.ReportMetric(amp, "stored-B/written-B")
}

// BenchmarkGetTables: Get of small chunks (kept in the tables, not the
// value log) from tables five times the block cache, so that most reads
// load a block from the file: what Badger's block checksum verification
// (ChecksumVerificationMode) costs shows here, where it is paid.
func BenchmarkGetTables(b *testing.B) {
	ctx := context.Background()
	dir := b.TempDir()
	opts := badgerstore.Options{BlockCacheSize: 1 << 20, Logger: slog.New(slog.DiscardHandler)}
	s, err := badgerstore.Open(dir, opts)
	if err != nil {
		b.Fatal(err)
	}
	pool := benchData("random", 200, 30000)
	refs := make([]cas.Ref, len(pool))
	for i, d := range pool {
		if refs[i], err = s.Put(ctx, d); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil { // the memtable becomes a table
		b.Fatal(err)
	}
	if s, err = badgerstore.Open(dir, opts); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	rng := rand.New(rand.NewPCG(1, 1))
	for b.Loop() {
		if _, err := s.Get(ctx, refs[rng.IntN(len(refs))]); err != nil {
			b.Fatal(err)
		}
	}
}
