package badgerstore

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/homefs/homefs/cas"
)

// Badger writes its value log, write-ahead logs and tables through memory
// maps of sparse files: a page it touches when the filesystem has no block
// left is SIGBUS, which kills the process, not ENOSPC. So the store never
// lets Badger near a full disk. A spaceGuard watches the free space of the
// store's filesystem (statfs, cached) and refuses new data (cas.ErrNoSpace)
// while less than the reserve would be left; the reserve is what Badger may
// still write into sparse mappings after the last write it was given.
//
// Part of the reserve is held as a ballast file, allocated blocks that no
// other writer on the filesystem (staging files, other processes) can take.
// The guard gives the ballast back when the free space outside it runs low,
// so that Badger's own background writes (memtable flushes, compaction, the
// write-ahead log of deletes, Close) find blocks, and allocates it again
// once there is room.

// ballastName is the ballast file in the store's directory.
const ballastName = "homefs-space.reserve"

// Refresh the cached free space at least this often, and after this many
// bytes were admitted since the last statfs (measured: a statfs of ext4
// costs about 1 µs, so neither bound is for speed; the byte bound keeps a
// burst from overdrawing the cached figure by more than a little).
const (
	spaceRefresh      = 100 * time.Millisecond
	spaceRefreshBytes = 4 << 20
)

// minOpenSpace is what opening needs: Badger writes the headers of a new
// value log and write-ahead log file through their mappings.
const minOpenSpace = 4 << 20

// Admission levels: new chunks must leave the whole reserve free. Chunks
// of held data (data a writer was told is written, counted against the
// headroom when it was accepted: see SpaceMeter) may use an eighth of it,
// the slack for what storing costs beyond the bytes themselves and for
// what other writers took since. Name updates (session heads, snapshot
// records, gc's bookkeeping) and chunks too small for the value log (tree
// nodes of small directories) may use a quarter of it, so that forget,
// session rm, gc and a flush of deletions still run on a full store.
type spaceUse int

const (
	useData spaceUse = iota
	useHeld
	useMeta
)

// need is the free space an admission of the given use must leave.
func (g *spaceGuard) need(use spaceUse) int64 {
	switch use {
	case useHeld:
		return g.reserve - g.reserve/8
	case useMeta:
		return g.reserve - g.reserve/4
	}
	return g.reserve
}

type spaceGuard struct {
	dir     string
	reserve int64 // bytes new data must leave free, ballast included
	ballast int64 // size of the ballast file
	log     *slog.Logger
	avail   func(dir string) (int64, error) // statfs; replaced in tests

	mu       sync.Mutex
	free     int64     // GUARDED_BY(mu); available at the last statfs
	admitted int64     // GUARDED_BY(mu); admitted and written since the last statfs
	inflight int64     // GUARDED_BY(mu); admitted into batches not committed yet
	checked  time.Time // GUARDED_BY(mu)
	held     bool      // GUARDED_BY(mu); the ballast file is allocated
	low      bool      // GUARDED_BY(mu); the last admission was refused

	stop chan struct{}
	done chan struct{}
}

// spaceReserve is the default reserve. Badger takes a block for every page
// it first writes, so the reserve is what it may write without being given
// new data: gc's rewrite of a value log file (its live data, at most
// ValueLogFileSize) before the file is dropped, and two write tables'
// worth for the write-ahead log of deletes and name updates and the tables
// that memtable flushes and compactions write; plus BatchBytes of slack
// for what other writers take between two looks.
func (o Options) spaceReserve() int64 {
	return o.ValueLogFileSize + o.BatchBytes + 2*o.MemTableSize
}

func newSpaceGuard(dir string, o Options) *spaceGuard {
	g := &spaceGuard{
		dir:     dir,
		reserve: max(o.SpaceReserve, 0),
		ballast: min(o.SpaceReserve/4, 2*o.MemTableSize),
		log:     o.Logger,
		avail:   availBytes,
	}
	if !spaceSupported {
		g.reserve = 0
	}
	if fi, err := os.Stat(g.ballastPath()); err == nil && diskUsage(fi) >= g.ballast {
		g.held = true
	}
	return g
}

func (g *spaceGuard) ballastPath() string { return filepath.Join(g.dir, ballastName) }

// opening checks that Badger can open: with less than minOpenSpace free it
// gives the ballast back, and fails with cas.ErrNoSpace if that does not help.
func (g *spaceGuard) opening() error {
	if g.reserve <= 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	free, err := g.avail(g.dir)
	if err != nil {
		return nil // unknown: let Badger try
	}
	if free < minOpenSpace && g.held {
		g.releaseLocked()
		free, _ = g.avail(g.dir)
	}
	if free < minOpenSpace {
		return fmt.Errorf("cas: open store %s: %d KiB free on its filesystem: %w", g.dir, free>>10, cas.ErrNoSpace)
	}
	return nil
}

// start refreshes the free space in the background, so that the ballast is
// given back when others fill the disk and writes resume once it is freed.
func (g *spaceGuard) start() {
	if g.reserve <= 0 {
		return
	}
	g.stop, g.done = make(chan struct{}), make(chan struct{})
	g.mu.Lock()
	g.refreshLocked()
	g.mu.Unlock()
	go func() {
		defer close(g.done)
		t := time.NewTicker(spaceRefresh)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
				g.mu.Lock()
				g.refreshLocked()
				g.mu.Unlock()
			}
		}
	}()
}

func (g *spaceGuard) close() {
	if g.stop == nil {
		return
	}
	close(g.stop)
	<-g.done
	g.stop = nil
}

// admit reserves n bytes for a write of the given use, or returns an error
// wrapping cas.ErrNoSpace.
func (g *spaceGuard) admit(n int64, use spaceUse) error {
	return g.admitAs(n, use, false)
}

// admitBatch is admit for a put into a batch: its n bytes count until
// settle says their transaction committed or was dropped, however many
// statfs calls come meanwhile (a batch holds up to BatchBytes unwritten).
func (g *spaceGuard) admitBatch(n int64, use spaceUse) error {
	return g.admitAs(n, use, true)
}

// settle ends n bytes of admitBatch: written (committed) or not.
func (g *spaceGuard) settle(n int64, written bool) {
	if g.reserve <= 0 || n == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.inflight -= n
	if written {
		g.admitted += n // until the next statfs shows them
	}
}

func (g *spaceGuard) admitAs(n int64, use spaceUse, batch bool) error {
	if g.reserve <= 0 {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checked) >= spaceRefresh || g.admitted+n > spaceRefreshBytes || g.low {
		g.refreshLocked()
	}
	need := g.need(use)
	left := g.leftLocked() - n
	if left < need {
		if !g.low {
			g.log.Warn("store disk is full: refusing new data", "dir", g.dir, "free_mib", g.free>>20, "reserve_mib", g.reserve>>20)
		}
		g.low = true
		return fmt.Errorf("cas: %d MiB free, %d MiB kept for the store: %w", max(g.free, 0)>>20, need>>20, cas.ErrNoSpace)
	}
	if g.low && use == useData {
		g.log.Info("store disk has room again", "dir", g.dir, "free_mib", g.free>>20)
		g.low = false
	}
	if batch {
		g.inflight += n
	} else {
		g.admitted += n
	}
	return nil
}

// leftLocked is the free space after what was admitted, the ballast
// counted as free (it is part of the reserve).
func (g *spaceGuard) leftLocked() int64 {
	left := g.free - g.admitted - g.inflight
	if g.held {
		left += g.ballast
	}
	return left
}

// headroom is how many bytes of new data the guard would admit now; ok is
// false when it admits everything.
func (g *spaceGuard) headroom() (int64, bool) {
	if g.reserve <= 0 {
		return 0, false
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.checked) >= spaceRefresh || g.low {
		g.refreshLocked()
	}
	return max(g.leftLocked()-g.reserve, 0), true
}

// refreshLocked reads the free space and keeps the ballast: given back
// when the space outside it runs below half its size, taken again once the
// whole reserve is free beside it.
func (g *spaceGuard) refreshLocked() {
	free, err := g.avail(g.dir)
	if err != nil {
		g.log.Warn("statfs of the store failed", "dir", g.dir, "err", err)
		return
	}
	switch {
	case g.held && free < g.ballast/2:
		g.releaseLocked()
		if f, err := g.avail(g.dir); err == nil {
			free = f
		}
	case !g.held && free >= g.reserve+g.ballast:
		if err := allocateFile(g.ballastPath(), g.ballast); err != nil {
			_ = os.Remove(g.ballastPath())
			if !errors.Is(err, errNoFallocate) {
				g.log.Warn("allocate the store's space reserve", "err", err)
			}
		} else {
			g.held = true
			if f, err := g.avail(g.dir); err == nil {
				free = f
			}
		}
	}
	g.free, g.admitted, g.checked = free, 0, time.Now()
}

// release gives the ballast back now (before Close and Compact, whose
// writes Badger makes whatever the free space).
func (g *spaceGuard) release() {
	if g.reserve <= 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	free, err := g.avail(g.dir)
	if err == nil && free < g.reserve && g.held {
		g.releaseLocked()
	}
}

func (g *spaceGuard) releaseLocked() {
	if err := os.Remove(g.ballastPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		g.log.Error("give back the store's space reserve", "err", err)
		return
	}
	g.held = false
	g.log.Warn("store disk is nearly full: gave back the space reserve", "dir", g.dir)
}
