package badgerstore_test

import (
	"bufio"
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/homefs/homefs/cas/badgerstore"
)

// procStatus reads a "kB" field of /proc/self/status in bytes.
func procStatus(t *testing.T, field string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n << 10
		}
	}
	return 0
}

// TestBadgerMemoryBound writes HOMEFS_CAS_GIB (default 2) GiB of random
// 64 KiB chunks through Put from two goroutines, then Syncs, and reports
// peak RSS (VmHWM) and peak anonymous RSS (sampled). Run with
// HOMEFS_LONG=1; see docs/BENCHMARKS.md.
func TestBadgerMemoryBound(t *testing.T) {
	if os.Getenv("HOMEFS_LONG") != "1" {
		t.Skip("set HOMEFS_LONG=1 to write gigabytes")
	}
	gib := 2
	if v, err := strconv.Atoi(os.Getenv("HOMEFS_CAS_GIB")); err == nil && v > 0 {
		gib = v
	}
	ctx := context.Background()
	opts := badgerstore.Options{}
	s, err := badgerstore.Open(t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	var peakAnon atomic.Int64
	stop := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Add(1)
	go func() {
		defer sampler.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if a := procStatus(t, "RssAnon"); a > peakAnon.Load() {
				peakAnon.Store(a)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()

	const size, workers = 64 << 10, 2
	total := gib << 30 / size
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.NewChaCha8([32]byte{byte(w)})
			buf := make([]byte, size)
			for next.Add(1) <= int64(total) {
				rng.Read(buf)
				if _, err := s.Put(ctx, buf); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	close(stop)
	sampler.Wait()
	hwm := procStatus(t, "VmHWM")
	t.Logf("wrote %d GiB in %v (%.0f MB/s); VmHWM %d MiB; peak RssAnon %d MiB; RssFile now %d MiB; MemoryBudget %d MiB",
		gib, elapsed.Round(time.Millisecond), float64(int64(gib)<<30)/elapsed.Seconds()/1e6,
		hwm>>20, peakAnon.Load()>>20, procStatus(t, "RssFile")>>20, opts.MemoryBudget()>>20)
	if peakAnon.Load() > opts.MemoryBudget() {
		t.Errorf("peak anonymous RSS %d MiB exceeds MemoryBudget %d MiB", peakAnon.Load()>>20, opts.MemoryBudget()>>20)
	}
}
