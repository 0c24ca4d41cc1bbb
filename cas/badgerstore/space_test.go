//go:build unix

package badgerstore

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
)

func testGuard(t *testing.T, free *atomic.Int64) *spaceGuard {
	t.Helper()
	g := newSpaceGuard(t.TempDir(), Options{SpaceReserve: 1000, MemTableSize: 100, Logger: slog.New(slog.DiscardHandler)})
	g.avail = func(string) (int64, error) { return free.Load(), nil }
	return g
}

func TestSpaceGuardAdmits(t *testing.T) {
	var free atomic.Int64
	g := testGuard(t, &free)
	require := func(ok bool, n int64, use spaceUse) {
		t.Helper()
		err := g.admit(n, use)
		if ok && err != nil || !ok && !errors.Is(err, cas.ErrNoSpace) {
			t.Fatalf("admit(%d, %d) with %d free: %v", n, use, free.Load(), err)
		}
	}
	// set changes the free space and makes the next admit look at it.
	set := func(n int64) { free.Store(n); g.checked = time.Time{} }
	set(5000) // takes the ballast (200) at the first refresh
	require(true, 10, useData)
	if !g.held {
		t.Fatal("ballast not taken with room for it")
	}
	if _, err := os.Stat(filepath.Join(g.dir, ballastName)); err != nil {
		t.Fatal(err)
	}
	set(900) // 900 + ballast 200 left: data needs 1000 + n
	require(true, 50, useData)
	require(false, 200, useData)
	require(true, 200, useMeta) // meta needs 750
	set(500)
	require(false, 1, useData)
	free.Store(2000) // room again: a refusal makes the next admit look
	require(true, 1, useData)
	set(50) // others took the space: the ballast goes
	require(false, 1, useMeta)
	if g.held {
		t.Fatal("ballast kept with the disk full")
	}
	if _, err := os.Stat(filepath.Join(g.dir, ballastName)); !os.IsNotExist(err) {
		t.Fatalf("ballast file: %v", err)
	}
}

// TestSpaceGuardHeld checks the headroom that write buffers are accepted
// under, and that storing them later may use an eighth of the reserve.
func TestSpaceGuardHeld(t *testing.T) {
	var free atomic.Int64
	g := testGuard(t, &free)
	free.Store(100) // no ballast: reserve 1000
	if head, ok := g.headroom(); !ok || head != 0 {
		t.Fatalf("headroom with less than the reserve free: %d %v", head, ok)
	}
	free.Store(1100)
	g.checked = time.Time{}
	if head, _ := g.headroom(); head != 100 {
		t.Fatalf("headroom with 1100 free: %d, want 100", head)
	}
	// Accepted under the headroom: 100 bytes buffered. Meanwhile others
	// took 50; storing the buffered bytes still fits in the slack.
	free.Store(1050)
	g.checked = time.Time{}
	if err := g.admit(100, useData); !errors.Is(err, cas.ErrNoSpace) {
		t.Fatalf("new data past the reserve admitted: %v", err)
	}
	if err := g.admitBatch(100, useHeld); err != nil {
		t.Fatalf("held data within the slack refused: %v", err)
	}
	if err := g.admitBatch(100, useHeld); !errors.Is(err, cas.ErrNoSpace) {
		t.Fatalf("held data past the slack (875 must stay) admitted: %v", err)
	}
	g.settle(100, true)
	free.Store(950) // what the next statfs shows
	if head, _ := g.headroom(); head != 0 {
		t.Fatalf("headroom after the held bytes: %d", head)
	}
	off := newSpaceGuard(t.TempDir(), Options{SpaceReserve: -1, Logger: slog.New(slog.DiscardHandler)})
	if _, ok := off.headroom(); ok {
		t.Fatal("a guard that is off reports a headroom")
	}
}

func TestSpaceGuardOpening(t *testing.T) {
	var free atomic.Int64
	g := testGuard(t, &free)
	free.Store(minOpenSpace - 1)
	if err := g.opening(); !errors.Is(err, cas.ErrNoSpace) {
		t.Fatalf("opening with %d free: %v", free.Load(), err)
	}
	free.Store(minOpenSpace)
	if err := g.opening(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkSpaceAdmit is the cost a put pays: a cached check, with a
// statfs every spaceRefreshBytes or spaceRefresh.
func BenchmarkSpaceAdmit(b *testing.B) {
	g := newSpaceGuard(b.TempDir(), Options{SpaceReserve: 1 << 20, MemTableSize: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
	b.SetBytes(64 << 10)
	for b.Loop() {
		if err := g.admit(64<<10, useData); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStatfs(b *testing.B) {
	dir := b.TempDir()
	for b.Loop() {
		if _, err := availBytes(dir); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSpaceGuardBatch: bytes put into a batch count until it commits,
// across statfs calls that cannot see them yet.
func TestSpaceGuardBatch(t *testing.T) {
	var free atomic.Int64
	g := testGuard(t, &free)
	g.ballast = 0 // no ballast: free is all there is
	free.Store(1500)
	if err := g.admitBatch(400, useData); err != nil {
		t.Fatal(err)
	}
	g.checked = time.Time{} // a statfs that does not see the batch
	if err := g.admitBatch(200, useData); !errors.Is(err, cas.ErrNoSpace) {
		t.Fatalf("second put: %v", err)
	}
	g.settle(400, false) // dropped
	if err := g.admitBatch(200, useData); err != nil {
		t.Fatal(err)
	}
}
