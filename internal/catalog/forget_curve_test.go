package catalog

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/cas/castest"
	"github.com/homefs/homefs/manifest"
)

// BenchmarkForgetCurve measures the curve, scaled down by
// default: a session captured every turn, whose rollout grows 64 KiB a
// turn and whose 1 MiB file is rewritten with new (incompressible) bytes
// each turn; every Every captures, forget --keep-last 10 and a gc (mark
// with Reachable, sweep, Compact). It reports the store's disk usage
// against what the kept snapshots reach (stored bytes) plus an empty
// store, and never asserts on time. HOMEFS_CURVE_TURNS (default 200) and
// HOMEFS_CURVE_EVERY (default 20) set the scale; the is 1000 and
// 100:
//
//	HOMEFS_CURVE_TURNS=1000 HOMEFS_CURVE_EVERY=100 go test -run '^$' \
//	  -bench ForgetCurve -benchtime 1x -v ./internal/catalog
func BenchmarkForgetCurve(b *testing.B) {
	turns, every := envInt("HOMEFS_CURVE_TURNS", 200), envInt("HOMEFS_CURVE_EVERY", 20)
	for range b.N {
		forgetCurve(b, turns, every)
	}
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

func forgetCurve(b *testing.B, turns, every int) {
	ctx := context.Background()
	dir := b.TempDir()
	st, err := badgerstore.Open(dir, badgerstore.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(b, err)
	defer st.Close()
	require.NoError(b, st.Sync(ctx))
	empty := badgerstore.DiskUsage(dir)
	c := New(st, WithClock(new(stepClock).now))
	_, err = c.CreateSession(ctx, "s", "")
	require.NoError(b, err)
	rng := rand.New(rand.NewPCG(11, 12))
	rollout := manifest.NewChunkList()
	var worst float64
	start := time.Now()
	for turn := 1; turn <= turns; turn++ {
		r, err := st.Put(ctx, castest.JSONL(manifest.ChunkSize, uint64(turn)))
		require.NoError(b, err)
		rollout.Set(rollout.Len(), r)
		big := make([]cas.Ref, 16)
		buf := make([]byte, manifest.ChunkSize)
		for i := range big {
			for j := range buf {
				buf[j] = byte(rng.Uint32())
			}
			if big[i], err = st.Put(ctx, buf); err != nil {
				b.Fatal(err)
			}
		}
		chunks, index, depth, err := rollout.Store(ctx, st)
		require.NoError(b, err)
		root, err := manifest.PutTree(ctx, st, &manifest.Tree{Entries: []manifest.Entry{
			{Name: "big.bin", Kind: manifest.KindFile, Mode: 0o644, Size: 1 << 20, Chunks: big},
			{Name: "rollout.jsonl", Kind: manifest.KindFile, Mode: 0o644, Size: int64(rollout.Len()) * manifest.ChunkSize,
				Chunks: chunks, Index: index, Depth: depth},
		}})
		require.NoError(b, err)
		_, _, err = c.Capture(ctx, "s", root, "turn", nil)
		require.NoError(b, err)
		if turn%every != 0 {
			continue
		}
		peak := badgerstore.DiskUsage(dir)
		_, err = c.ForgetPolicy(ctx, "s", Policy{Last: 10}, nil, time.UTC, false)
		require.NoError(b, err)
		live, freed := curveGC(b, st)
		du := badgerstore.DiskUsage(dir)
		ratio := float64(du) / float64(live+empty)
		worst = max(worst, ratio)
		b.Logf("turn %4d: du %7.1f MiB before forget+gc, %7.1f MiB after; kept snapshots reach %7.1f MiB stored (+ %.1f MiB empty store): %.2f×; gc freed %d chunks",
			turn, mib(peak), mib(du), mib(live), mib(empty), ratio, freed)
	}
	b.ReportMetric(worst, "worst-du/kept")
	b.ReportMetric(time.Since(start).Seconds()/float64(turns), "s/turn")
}

// curveGC is gc without the engine: mark with Reachable, delete the rest,
// compact. It returns the stored bytes marked and the chunks freed.
func curveGC(b *testing.B, st *badgerstore.Store) (live int64, freed int) {
	ctx := context.Background()
	marked := map[cas.Ref]bool{}
	require.NoError(b, Reachable(ctx, st, func(r cas.Ref) error { marked[r] = true; return nil }))
	var dead []cas.Ref
	require.NoError(b, st.Enumerate(ctx, func(ci cas.ChunkInfo) error {
		if marked[ci.Ref] {
			live += ci.StoredSize
		} else {
			dead = append(dead, ci.Ref)
		}
		return nil
	}))
	require.NoError(b, st.Delete(ctx, dead...))
	if len(dead) > 0 {
		_, err := st.Compact(ctx)
		require.NoError(b, err)
	}
	return live, len(dead)
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }
