package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Staged files: see doc.go, Staged files.

// fingerprint identifies a staging file's state: with multigrain
// timestamps every write changes ctime.
type fingerprint struct{ size, mtime, ctime int64 }

func fingerprintOf(f *os.File) (fingerprint, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fingerprint{}, fmt.Errorf("backing file: %w", err)
	}
	return fingerprint{size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, nil
}

// stagingOK reports whether the backing directory's filesystem changes a
// file's ctime on every write that follows a stat, which a fingerprint
// relies on; it is probed once per session.
func (s *Session) stagingOK() bool {
	s.staging.once.Do(func() {
		if s.noStage {
			return
		}
		ok, err := probeFineCtime(s.backingDir)
		if err != nil {
			s.log.Warn("no staged files", "session", s.name, "err", err)
		}
		s.staging.ok = ok
	})
	return s.staging.ok
}

func probeFineCtime(dir string) (bool, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return false, err
	}
	f, err := os.CreateTemp(dir, "probe-*")
	if err != nil {
		return false, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	prev, err := fingerprintOf(f)
	if err != nil {
		return false, err
	}
	for i := range 64 {
		if _, err := f.WriteAt([]byte{byte(i)}, 0); err != nil {
			return false, err
		}
		fp, err := fingerprintOf(f)
		if err != nil {
			return false, err
		}
		if fp.ctime == prev.ctime || fp.mtime == prev.mtime {
			return false, nil
		}
		prev = fp
	}
	return true, nil
}

// observe updates n's times from its staged file, as a write through the
// daemon would (and drops privileges likewise), and returns the file's
// size. Called with freeze held shared and n.mu held.
func (n *node) observe() (int64, error) {
	b := n.data.backing
	fp, err := fingerprintOf(b.f)
	if err != nil {
		return 0, err
	}
	n.noteWrite(b, fp)
	b.stage.size = fp.size
	return fp.size, nil
}

// noteWrite applies what a write that changed b to fp implies for n's
// times (its privileges dropped when it was written, see Setattr). Called
// with n.mu held.
func (n *node) noteWrite(b *backing, fp fingerprint) {
	if fp.mtime == b.mtime {
		return
	}
	n.wroteAt(fp.mtime)
	b.mtime = fp.mtime
}

// absorb makes n's content what its backing file holds, writing only the
// chunks that differ, and returns the file's fingerprint from before it
// was read. Called with freeze held and n.mu held.
func (n *node) absorb(ctx context.Context) (fingerprint, error) {
	d, b := n.data, n.data.backing
	// Before the fingerprint: a mapping's stores show in no fingerprint,
	// so a file a mapping may write is read whole (mappable).
	mapped := b.mappable()
	fp, err := fingerprintOf(b.f)
	if err != nil {
		return fp, err
	}
	if fp == b.absorbed && !b.unsure() && !mapped {
		b.stage.idle.due = false
		return fp, nil
	}
	if fp.size < d.size {
		if err := n.truncate(ctx, fp.size); err != nil {
			return fp, err
		}
		n.sess.markDirty(n)
	}
	buf := make([]byte, manifest.ChunkSize)
	for i := 0; int64(i)*manifest.ChunkSize < fp.size; i++ {
		off := int64(i) * manifest.ChunkSize
		p := buf[:chunkLen(fp.size, i)]
		k, err := b.f.ReadAt(p, off)
		if err != nil && !errors.Is(err, io.EOF) {
			return fp, fmt.Errorf("read backing file: %w", err)
		}
		clear(p[k:]) // it shrank meanwhile: the fingerprint check sees that
		if same, err := n.holds(ctx, i, p); err != nil {
			return fp, err
		} else if same {
			continue
		}
		if err := n.putBack(ctx, p, off); err != nil {
			return fp, err
		}
		n.sess.markWritten(n, off, off+int64(len(p)))
		if err := n.sess.maybeSpill(ctx, n, -1); err != nil {
			return fp, err
		}
	}
	if d.size < fp.size {
		if err := n.growTo(ctx, fp.size); err != nil {
			return fp, err
		}
		n.sess.markWritten(n, fp.size, fp.size)
	}
	n.noteWrite(b, fp)
	b.absorbed, b.stage.size, b.ingested, b.fresh = fp, fp.size, fp.size, true
	b.looked(mapped)
	b.idleAbsorbed(time.Now())
	return fp, nil
}

// holds reports whether chunk i of n is stored, clean and exactly p.
// Called with n.mu held.
func (n *node) holds(ctx context.Context, i int, p []byte) (bool, error) {
	d := n.data
	if chunkLen(d.size, i) != len(p) {
		return false, nil
	}
	if _, dirty := d.dirty[i]; dirty {
		return false, nil
	}
	ref, err := n.storedRef(ctx, i)
	if err != nil {
		return false, err
	}
	if ref.IsZero() {
		return isZero(p), nil
	}
	return cas.Sum(p) == ref, nil
}

// unstage absorbs n's staged file and makes it a wild backing file, whose
// content the node holds from then on. Called with freeze held and n.mu
// held.
func (n *node) unstage(ctx context.Context) error {
	b := n.data.backing
	if _, err := n.absorb(ctx); err != nil {
		return err
	}
	b.unstage()
	return nil
}

// absorbDue reports whether a flush absorbs b's staged file: one that has
// a name, when the flush takes everything (all: a capture, Sync, Close) or
// the file is closed or holds fsynced content no durable head has. Called
// with the node's mu held.
func (b *backing) absorbDue(all, named bool) bool {
	return named && (all || b.opens == 0 || b.stage.fsynced || b.stage.idle.due)
}

// idleState is the periodic flush's watch on a staged file that stays
// open (a `cmd > file` whose command went quiet): a file unchanged over a
// whole flush interval, yet changed since its last absorb, is absorbed by
// the next flush (due), so that a crash loses no more of it than of a
// file the daemon serves. After each such absorb the file must stay idle
// longer before the next (gap doubles up to idleGapMax): an absorb reads
// the whole file, and a writer that pauses often must not make the flush
// reread it every interval.
type idleState struct {
	seen fingerprint // the file at the last look
	due  bool
	next time.Time     // no idle absorb before
	gap  time.Duration // the wait after the next idle absorb
}

// Bounds of idleState.gap.
const (
	idleGapMin = 10 * time.Second
	idleGapMax = 5 * time.Minute
)

// stagedIdle looks at every open staged file of s for the periodic flush
// and reports whether one is due (idleState). One fstat each.
func (s *Session) stagedIdle(now time.Time) bool {
	due := false
	for _, n := range s.backed.list() {
		n.mu.Lock()
		b := n.data.backing
		if b != nil && b.isStaged() && b.opens > 0 && !b.stage.idle.due {
			if fp, err := fingerprintOf(b.f); err == nil && fp != b.absorbed {
				idle := &b.stage.idle
				if fp == idle.seen && !now.Before(idle.next) {
					idle.due, due = true, true
				}
				idle.seen = fp
			}
		}
		n.mu.Unlock()
	}
	return due
}

// idleAbsorbed records an absorb of b made because it was due. Called
// with the node's mu held.
func (b *backing) idleAbsorbed(now time.Time) {
	idle := &b.stage.idle
	if !idle.due {
		return
	}
	idle.due = false
	idle.gap = min(max(2*idle.gap, idleGapMin), idleGapMax)
	idle.next = now.Add(idle.gap)
}

// absorbLater queues n, a staged file whose last passthrough handle
// closed, for the session's absorber, which absorbs and drops it under the
// freeze lock held shared, as a writer would, rather than in a flush.
// Once the session is closed nothing is queued and no absorber starts
// (workers); one that runs ends at its next look at the queue, which it
// empties.
func (s *Session) absorbLater(n *node) {
	if s.workers.isClosed() {
		return
	}
	q := queuedAbsorb{n: n, closed: time.Now(), epoch: s.keepEpoch.Load()}
	if s.absorbs.add(q) && !s.workers.start(s.absorber) {
		s.absorbs.stopped()
	}
}

// absorbQueue holds the closed staged files waiting for the absorber
// goroutine, which runs while running is set: the queue and the flag are
// under one lock, so that a file queued as the absorber ends (it found
// the queue empty) starts the next one.
type absorbQueue struct {
	mu      sync.Mutex
	queue   []queuedAbsorb // GUARDED_BY(mu)
	running bool           // GUARDED_BY(mu)
}

// add queues q and reports whether the caller is to start the absorber:
// none runs (running is then set).
func (a *absorbQueue) add(q queuedAbsorb) (start bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queue = append(a.queue, q)
	if a.running {
		return false
	}
	a.running = true
	return true
}

// take is the absorber's look at the queue: it empties it and returns
// what it held, or reports end (running is then unset) when the session
// closed, or when the queue was empty and the absorber lingered long
// enough.
func (a *absorbQueue) take(closed, lingered bool) (queue []queuedAbsorb, end bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	queue = a.queue
	a.queue = nil
	if closed || len(queue) == 0 && lingered {
		a.running = false
		return nil, true
	}
	return queue, false
}

// putBack puts the files the absorber held back at the queue's head.
func (a *absorbQueue) putBack(held []queuedAbsorb) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queue = append(held, a.queue...)
}

// stopped undoes add's claim of the absorber, which did not start (the
// session closed): the queue is dropped.
func (a *absorbQueue) stopped() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.queue = nil
	a.running = false
}

// queuedAbsorb is a closed staged file waiting for the absorber: when its
// last handle closed, and, once the absorber held it back, until when.
type queuedAbsorb struct {
	n      *node
	closed time.Time
	until  time.Time
	epoch  uint64 // Session.keepEpoch when queued
}

// The absorber polls its queue every absorbPoll for absorbLinger after it
// emptied it, rather than ending and being started again by the next
// release: starting a goroutine (or waking one) from a ring thread wakes a
// thread on another CPU, which cost a release as much as the rest of it
// (untar); a sleeping absorber wakes on its own timer instead.
//
// A file of absorbHoldMin bytes or more stays staged for absorbHold after
// its last close: a read that follows at once (cat after dd, the build
// step after a download, a test reading what the agent wrote) opens it
// while it is staged and reads the staging file through passthrough, at
// the speed of the page cache that still holds it, where once absorbed its
// reads are the daemon's, from the store (BenchmarkSeqReadJustWritten).
// Such a reader holds the absorb off until it closes. Small files are
// taken at once, so that their staging files go back to the next new file
// (untar); a flush absorbs a held file as any closed one.
const (
	absorbPoll    = 500 * time.Microsecond
	absorbLinger  = 20 * time.Millisecond
	absorbHold    = time.Second
	absorbHoldMin = 1 << 20
	// absorbHeldPoll is the poll while only held files wait.
	absorbHeldPoll = 5 * time.Millisecond
)

// absorber takes over the queued nodes; it ends once the queue stayed
// empty for absorbLinger, or the session closed.
func (s *Session) absorber() {
	ctx := context.Background()
	var idle time.Duration
	for {
		queue, end := s.absorbs.take(s.workers.isClosed(), idle >= absorbLinger)
		if end {
			return
		}
		if len(queue) == 0 {
			time.Sleep(absorbPoll)
			idle += absorbPoll
			continue
		}
		idle = 0
		var held []queuedAbsorb
		took := false
		for _, q := range queue {
			if now := time.Now(); now.Before(q.until) {
				held = append(held, q)
				continue
			}
			if s.absorbQueued(ctx, &q) {
				took = true
			} else {
				held = append(held, q)
			}
		}
		if len(held) == 0 {
			continue
		}
		s.absorbs.putBack(held)
		if !took {
			time.Sleep(absorbHeldPoll)
		}
	}
}

// absorbQueued takes over q's node, a queued staged file, into write
// buffers, which frees its staging file for the next new file at once;
// the buffers go to the store as any write's do (spillAll: with the next
// flush, or in a goroutine past the engine's budget), so that neither
// this nor a request served on a ring thread waits for the hashing and
// compressing. It reports false, with q.until set, for a file it holds
// back (absorbHold).
func (s *Session) absorbQueued(ctx context.Context, q *queuedAbsorb) bool {
	n := q.n
	s.freeze.RLock()
	// Before n.mu (lock order). A file with no name that a handle still
	// reads (another mount's, served by the daemon) is absorbed too.
	reachable := s.hasName(n) || s.open.has(n)
	n.mu.Lock()
	var err error
	var dispose func()
	evict := false
	if b := n.data.backing; b != nil && b.isStaged() && b.opens == 0 {
		big := reachable && b.kind != backingKept && holdStaged(b) // one fstat
		switch {
		case !reachable:
			dispose = n.detachBacking() // unlinked and closed: nothing to keep
		case b.kind == backingKept:
			// A read copy whose last reader closed: as it was.
		case big && q.until.IsZero():
			hold := absorbHold
			if h := s.holdFor.Load(); h != 0 {
				hold = time.Duration(h)
			}
			q.until = q.closed.Add(hold)
			n.mu.Unlock()
			s.freeze.RUnlock()
			return false
		case big && q.epoch == s.keepEpoch.Load() && s.keepRoom():
			if _, err = n.absorb(ctx); err == nil {
				b.keep(q.epoch, time.Now())
				evict = true
			}
		default:
			dispose, err = n.detachIngested(ctx)
		}
	}
	n.mu.Unlock()
	if evict {
		s.evictKept()
	}
	if err == nil {
		err = s.spillAll(ctx)
	}
	s.freeze.RUnlock()
	if dispose != nil {
		// Here rather than in a goroutine of its own: starting one per
		// file wakes another thread per file.
		dispose()
	}
	if err != nil {
		// The next flush tries again, and reports it.
		s.log.Warn("absorb a staged file", "session", s.name, "err", err)
	}
	return true
}

// holdStaged reports whether the absorber holds b, a closed staged file,
// back for absorbHold: it has absorbHoldMin bytes or more. Called with the
// node's mu held.
func holdStaged(b *backing) bool {
	fp, err := fingerprintOf(b.f)
	return err == nil && fp.size >= absorbHoldMin
}

// Read copies. A big staged file (absorbHoldMin) that the absorber takes
// stays its node's backing file once absorbed, of kind kept: the node
// holds its content (into the store with the next flush) and the staging
// file the same bytes, so a reader's open, at any later time, reads it
// through passthrough at the page cache's speed rather than the daemon's
// from the store, which verifies and copies every chunk (cold reads,
// SeqReadJustWritten). It is the same file, with the same trust, as the
// staging file a reader reads before the absorb: bytes the daemon hashed
// as it took them, under a name only the daemon uses, in the store's own
// directory. Any change of the file makes it an ordinary
// staged file again (a writer's open, which the daemon then takes over, a
// truncate, which unstages it), and the next absorb makes it kept again.
//
// A file that lost its names loses its copy at its last close; an edit
// that takes files out of the tree with their nlink (a restore, a
// directory grafted over or removed) ends the keep epoch (forgetKept).
// Files with setuid, setgid or capabilities get no passthrough, so no
// reader of a copy. Kept copies of a session take at most keptMax bytes,
// the oldest going first, and only while the backing directory's
// filesystem has keptFreeMin of itself free: a flush, or a tick of the
// periodic flush, that finds less drops them all, so that they never take
// from the store the space a write needs.
const (
	keptMax     = 2 << 30
	keptFreeMin = 0.10
)

// keepRoom reports whether the backing directory's filesystem has room
// for read copies.
func (s *Session) keepRoom() bool { return hasRoom(s.backingDir) }

// hasRoom reports whether the filesystem of dir has keptFreeMin of itself
// free.
func hasRoom(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil || st.Blocks == 0 {
		return false
	}
	return float64(st.Bavail) >= keptFreeMin*float64(st.Blocks)
}

// evictKept drops the oldest read copies of s while they take more than
// keptMax bytes. Called with freeze held shared and no node's mu held.
func (s *Session) evictKept() {
	type keptCopy struct {
		n    *node
		at   time.Time
		size int64
	}
	var kept []keptCopy
	var total int64
	for _, n := range s.backed.list() {
		n.mu.Lock()
		if b := n.data.backing; b != nil && b.kind == backingKept {
			kept = append(kept, keptCopy{n, b.stage.keptAt, b.stage.size})
			total += b.stage.size
		}
		n.mu.Unlock()
	}
	slices.SortFunc(kept, func(a, b keptCopy) int { return a.at.Compare(b.at) })
	for _, c := range kept {
		if total <= keptMax {
			return
		}
		c.n.mu.Lock()
		if b := c.n.data.backing; b != nil && b.kind == backingKept && b.stage.keptAt.Equal(c.at) && b.opens == 0 && c.n.ingestedAsIs() {
			c.n.dropBacking()
			total -= c.size
		}
		c.n.mu.Unlock()
	}
}

// dropKeptIfFull drops s's read copies when the disk has no room for
// them (keepRoom): the periodic flush's check, which runs whether or not
// the session changed, since a staged writer filling the disk changes
// nothing the daemon sees until its close.
func (s *Session) dropKeptIfFull() {
	has := false
	for _, n := range s.backed.list() {
		n.mu.Lock()
		has = has || n.data.backing != nil && n.data.backing.kind == backingKept
		n.mu.Unlock()
	}
	if !has || s.keepRoom() {
		return
	}
	s.freeze.RLock()
	s.dropKept()
	s.freeze.RUnlock()
}

// forgetKept ends the keep epoch, so that no node queued before is kept
// and every flush drops the copies kept before, and drops those no handle
// uses now. Called with freeze held exclusively.
func (s *Session) forgetKept() {
	s.keepEpoch.Add(1)
	s.dropKept()
}

// dropKept drops every read copy of s that no handle uses. Called with
// freeze held (shared or exclusively).
func (s *Session) dropKept() {
	for _, n := range s.backed.list() {
		n.mu.Lock()
		if b := n.data.backing; b != nil && b.kind == backingKept && b.opens == 0 && n.ingestedAsIs() {
			n.dropBacking()
		}
		n.mu.Unlock()
	}
}

// removeStaleBackings removes the staging files no journal record can
// name any more.
func (s *Session) removeStaleBackings() {
	s.removeBackingNames(s.backed.takeStale())
}

// clearBackingDir removes what earlier daemons left in the backing
// directory, once the journal that might name it has been replayed, but
// the files sealed now (keep): a writer that outlived the daemon may still
// hold one, and a sealed file keeps failing its writes only while it has
// a name. They go at the next load.
func (s *Session) clearBackingDir(keep map[string]bool) {
	entries, err := os.ReadDir(s.backingDir)
	if err != nil {
		return
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if !keep[e.Name()] {
			names = append(names, e.Name())
		}
	}
	s.removeBackingNames(names)
}

// sealedPrefix marks a backing file a loading daemon found and sealed.
const sealedPrefix = "sealed-"

// sealBackingDir seals every backing file an earlier daemon left (chattr
// +i, after renaming it with sealedPrefix), before the journal that may
// name them is replayed: a writer that outlived that daemon and still
// holds one gets EPERM from then on, rather than writing where no one
// reads, and what it wrote before is replayed. It returns the names
// sealed; a file it cannot seal (an unprivileged daemon) keeps its name.
func (s *Session) sealBackingDir() map[string]bool {
	entries, err := os.ReadDir(s.backingDir)
	if err != nil {
		return nil
	}
	sealed := make(map[string]bool)
	var failed error
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, sealedPrefix) {
			continue // sealed by an earlier load; it goes after this one's replay
		}
		if err := s.sealBacking(name); err != nil {
			if failed == nil {
				failed = err
			}
			continue
		}
		sealed[sealedPrefix+name] = true
	}
	if failed != nil {
		s.log.Warn("could not seal the backing files an earlier daemon left: a writer still holding one writes where no one reads",
			"session", s.name, "err", failed)
	}
	return sealed
}

func (s *Session) sealBacking(name string) error {
	sealed := filepath.Join(s.backingDir, sealedPrefix+name)
	err := os.Rename(filepath.Join(s.backingDir, name), sealed)
	if errors.Is(err, os.ErrPermission) {
		// Sealed under its own name by the end of an earlier daemon
		// (sealBackings): opened up for the rename, sealed again below.
		err = s.unsealRename(name, sealed)
	}
	if err != nil {
		return err
	}
	f, err := os.Open(sealed)
	if err != nil {
		return err
	}
	defer f.Close()
	return setImmutable(f, true)
}

// unsealRename clears the seal of the backing file name and renames it to
// to.
func (s *Session) unsealRename(name, to string) error {
	f, err := os.Open(filepath.Join(s.backingDir, name))
	if err != nil {
		return err
	}
	err = setImmutable(f, false)
	f.Close()
	if err != nil {
		return err
	}
	return os.Rename(filepath.Join(s.backingDir, name), to)
}

// openBackingName opens the backing file name, which a loading daemon may
// have sealed under sealedPrefix.
func (s *Session) openBackingName(name string) (*os.File, error) {
	f, err := os.Open(filepath.Join(s.backingDir, name))
	if errors.Is(err, os.ErrNotExist) {
		return os.Open(filepath.Join(s.backingDir, sealedPrefix+name))
	}
	return f, err
}

func (s *Session) removeBackingNames(names []string) {
	for _, name := range names {
		p := filepath.Join(s.backingDir, name)
		err := os.Remove(p)
		if errors.Is(err, os.ErrPermission) {
			// Sealed by the end of an earlier daemon (sealBackings).
			if f, oerr := os.Open(p); oerr == nil {
				if setImmutable(f, false) == nil {
					err = os.Remove(p)
				}
				f.Close()
			}
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("remove staging file", "session", s.name, "err", err)
		}
	}
}

// hasName reports whether n has a name in the tree (an unlinked file has
// none). Takes treeMu: call it with no node lock held.
func (s *Session) hasName(n *node) bool {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	return n.nlink > 0
}

// fsyncStaged makes n's staged content durable, if n is staged: it
// reports false when it is not.
func (s *Session) fsyncStaged(ctx context.Context, n *node) (bool, error) {
	if n.kind != manifest.KindFile || s.journal == nil {
		return false, nil
	}
	n.mu.Lock()
	b := n.data.backing
	staged := b != nil && b.isStaged()
	n.mu.Unlock()
	if !staged {
		return false, nil
	}
	// A handle is open (this fsync came through one), so b is not
	// dropped meanwhile and b.f stays open.
	fp, err := fingerprintOf(b.f)
	if err != nil {
		return true, err
	}
	if err := fdatasync(b.f); err != nil {
		return true, fmt.Errorf("sync staging file: %w", err)
	}
	// The bytes fsynced here must reach the store some day, and the
	// kernel wrote them without asking. While the store is short of room
	// for them, the fsync flushes the session first, as every fsync after
	// a new file once did: the store refuses that flush with ENOSPC once
	// it is down to what it keeps for itself, and staged files stop there
	// instead of eating the disk until the store cannot even open.
	if err := s.roomFor(fp.size); err != nil {
		if err := s.flushNow(ctx); err != nil {
			return true, err
		}
	}
	name, err := s.nameStaging(n, b)
	if err != nil {
		return true, err
	}
	for range 3 {
		done, err := s.journalStage(ctx, n, b, name, fp.size)
		if err != nil || done {
			return true, err
		}
		// The namespace changed since the durable head: move it first.
		if err := s.flushNow(ctx); err != nil {
			return true, err
		}
	}
	// The journal keeps refusing: let a flush absorb the file.
	return true, s.absorbNow(ctx, n, b)
}

// absorbNow makes n's staged content (in b) durable by a flush that
// absorbs it.
func (s *Session) absorbNow(ctx context.Context, n *node, b *backing) error {
	n.mu.Lock()
	if b.isStaged() {
		b.stage.fsynced = true
	}
	n.mu.Unlock()
	return s.flushNow(ctx)
}

// nameStaging makes the name of b's file in the backing directory
// durable, if it is not yet, and returns it: a stage record names the
// file by it, and from then on the file is never recycled (pinned).
func (s *Session) nameStaging(n *node, b *backing) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	b.pinned = true
	if b.stage.nameSynced {
		return b.name, nil
	}
	dirSynced := s.backed.dirSynced.Load()
	dirs := []string{s.backingDir}
	if !dirSynced {
		dirs = append(dirs, filepath.Dir(s.backingDir), filepath.Dir(filepath.Dir(s.backingDir)))
	}
	for _, dir := range dirs {
		d, err := os.Open(dir)
		if err == nil {
			err = d.Sync()
			d.Close()
		}
		if err != nil {
			// The next fsync syncs the directory again.
			return "", fmt.Errorf("sync backing directory: %w", err)
		}
	}
	s.backed.dirSynced.Store(true)
	b.stage.nameSynced = true
	return b.name, nil
}

// journalStage appends a stage record for n (staged in b, named name, size
// bytes synced) to the journal. It reports false when the durable head does
// not have n's path (the namespace changed since).
func (s *Session) journalStage(ctx context.Context, n *node, b *backing, name string, size int64) (bool, error) {
	s.freeze.RLock()
	defer s.freeze.RUnlock()
	if !s.journaling() {
		return false, nil
	}
	id := s.lockedJID(n)
	n.mu.Lock()
	if n.data.backing != b || !b.isStaged() {
		// Unstaged meanwhile: the node holds the content now.
		n.mu.Unlock()
		done, err := s.journalFsync(ctx, n)
		if err != nil || done {
			return true, err
		}
		return false, nil
	}
	if id == 0 {
		n.mu.Unlock()
		if !s.journaling() {
			return false, nil
		}
		return true, nil // no name: nothing to bring back
	}
	// Set first: should the append fail, a flush absorbs the file.
	b.stage.fsynced = true
	n.mu.Unlock()
	err := s.journal.append([]journalRecord{{kind: recStage, id: id, size: size, data: []byte(name)}})
	if errors.Is(err, errJournalFull) {
		return true, s.flushNow(ctx)
	}
	// b.stage.fsynced stays set: the journal holds the record only until
	// the head next moves, and the flush that moves it absorbs the file.
	return true, err
}

// restage replays a stage record: n's content becomes the first size
// bytes of the staging file name. It returns the bytes it read. Called
// before the session is shown.
func (s *Session) restage(ctx context.Context, n *node, name string, size int64) (int64, error) {
	f, err := s.openBackingName(name)
	if err != nil {
		return 0, fmt.Errorf("staging file of a journaled fsync: %w", err)
	}
	defer f.Close()
	// The file may have been truncated since the fsync (then unstaged, its
	// staging file kept current): what it holds now is a state the file
	// had, where zeros past its end would not be.
	st, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("staging file of a journaled fsync: %w", err)
	}
	size = min(size, st.Size())
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.truncate(ctx, 0); err != nil {
		return 0, err
	}
	var read int64
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		p := buf[:min(int64(len(buf)), size-off)]
		k, err := f.ReadAt(p, off)
		read += int64(k)
		if err != nil && !errors.Is(err, io.EOF) {
			return read, fmt.Errorf("read staging file: %w", err)
		}
		clear(p[k:])
		if err := n.writeAt(ctx, p, off); err != nil {
			return read, err
		}
		off += int64(len(p))
		if err := s.maybeSpill(ctx, n, -1); err != nil {
			return read, err
		}
	}
	return read, nil
}
