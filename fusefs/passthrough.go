package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Passthrough appenders and the backing file's kinds: see doc.go.

// maxBacked bounds the files copied into a backing file on open.
const maxBacked = 64 << 20

// backing is a node's local copy that passthrough opens read and write.
// GUARDED_BY(node.mu) for every field but f, which is fixed.
//
// Its kind says what f is to the node, and changes only through the
// transitions below (join, makeWild, keep, unkeep, unstage); every kind
// ends when the node drops f (detachBacking):
//
//	openBacking: a copy        openBacking: routeStaged
//	      │                          │
//	      ▼                          ▼          keep
//	  appender ──makeWild──► wild ◄──unstage── staged ◄─────► kept
//	                          ▲                         unkeep  │
//	                          └───────────unstage───────────────┘
type backing struct {
	f     *os.File
	kind  backingKind
	opens int // passthrough handles open, in every mount

	// What the node took from f, as of the last ingest or absorb.
	ingested int64       // bytes of f the node's content holds
	mtime    int64       // f's mtime when last ingested
	absorbed fingerprint // f as of the last absorb (staged, kept, and wild where fingerprints work)

	// mapping is what a mapping of f may do, as far as the opens that
	// joined it allow (a passthrough reader or O_RDWR opener, of any kind).
	mapping mapState

	// name is f's name in the backing directory, which every backing
	// file has from birth (makeBackingFile): a journal record names f by
	// it (a live or a stage record), and a restarted daemon finds f there.
	name string

	// The two facts below are booleans because they are independent of
	// the kind and of each other. fresh is set when an ingest took new
	// bytes from f, and cleared by the flush that keeps f once more for
	// that reason (dropIdleBacking; it matters to appender and wild
	// files). pinned is set once a stage record (a staged file's fsync:
	// nameStaging) named f: a replay reads f for it, so f keeps its bytes
	// until the journal's next reset and is never recycled (recyclable).
	fresh  bool
	pinned bool

	// watch is set once a reader that sets atimes was passed through to
	// f: its reads show only in f's own atime, which was atime when last
	// looked at (atime.go). A boolean too: it holds of a file of any kind.
	watch bool
	atime int64

	// stage applies to the staged and kept kinds only (but
	// stage.nameSynced, which any kind may have): nothing reads it for
	// another (an absorb of a wild file updates size all the same).
	stage stageState
	// jid is the journal id of the node in the live record that names f,
	// in the journal's incarnation jinc (liveBacking); 0 for none.
	jid, jinc uint64
}

// backingKind is what a backing file is to its node.
type backingKind uint8

const (
	// backingAppender: a copy of the node's content that passthrough
	// writers append to; an ingest takes its tail past ingested.
	backingAppender backingKind = iota
	// backingWild: a copy that a passthrough open may have written before
	// ingested, or mapped; an ingest compares all of it.
	backingWild
	// backingStaged: a staging file (staged.go), which holds the file's
	// content; the node holds it only as of the last absorb.
	backingStaged
	// backingKept: a closed staged file the absorber absorbed and kept as
	// its node's read copy (Read copies, staged.go). Everything said of a
	// staged file holds for it too (isStaged).
	backingKept
)

// stageState is what a backing file of kind staged or kept has besides.
type stageState struct {
	// nameSynced says the backing directory was synced since f got its
	// name (nameStaging), which makes the name durable.
	nameSynced bool
	fsynced    bool      // an fsync made content durable that no durable head holds
	size       int64     // f's size when last observed
	idle       idleState // the periodic flush's watch on an open file
	// keptAt is when the file was last kept, keptEpoch Session.keepEpoch
	// then.
	keptAt    time.Time
	keptEpoch uint64
}

// isStaged reports whether b holds its node's content: it is a staging
// file, or one kept as a read copy.
func (b *backing) isStaged() bool { return b.kind == backingStaged || b.kind == backingKept }

// join counts in b a passthrough descriptor opened with flags by route r.
// Called with the node's mu held.
func (b *backing) join(flags uint32, r route) {
	b.opens++
	acc := flags & syscall.O_ACCMODE
	if acc != syscall.O_WRONLY && b.mapping == mapNone {
		b.mapping = mapRead
	}
	if acc != syscall.O_RDONLY {
		b.unkeep() // it may change: absorbed again on release
	}
	if acc == syscall.O_RDWR {
		b.mapping = mapUnsure // it may map the file (mappable)
	}
	if r == routeWild {
		b.makeWild() // may write before the end, or map the file
	}
}

// makeWild turns an appender's file wild: a descriptor that may write
// before its end, or map it, joined. A staged or kept file is left as it
// is (openRoute gives its writers routeJoin): its fingerprint shows every
// write.
func (b *backing) makeWild() {
	if b.kind == backingAppender {
		b.kind = backingWild
	}
}

// keep makes b, a staged file just absorbed, its node's read copy, kept
// at at in keep epoch epoch.
func (b *backing) keep(epoch uint64, at time.Time) {
	b.kind = backingKept
	b.stage.keptAt, b.stage.keptEpoch = at, epoch
}

// unkeep makes a read copy a staged file again: a writer joined it.
func (b *backing) unkeep() {
	if b.kind == backingKept {
		b.kind = backingStaged
	}
}

// unstage makes b, a staged or kept file whose content the node now
// holds, wild. It keeps its name (and a live record naming it stays
// true: the daemon's own writes reach it through writeThrough).
func (b *backing) unstage() { b.kind = backingWild }

// mapState is what a mapping of a backing file may do (mmap needs read
// access, and a shared writable one O_RDWR). Each state includes the ones
// before it.
type mapState uint8

const (
	// mapNone: every passthrough open of f was write-only, so nothing can
	// map it.
	mapNone mapState = iota
	// mapRead: an open could read f, so map it, and a mapping outlives
	// every open: f is never recycled for another file (recyclable).
	mapRead
	// mapShared: an O_RDWR open joined f: it may map f shared and
	// writable (mappable); the last look at f's content saw every store.
	mapShared
	// mapUnsure: as mapShared, but the last look may have missed stores
	// through such a mapping, so that the next look reads it all.
	mapUnsure
)

// unsure reports whether the last look at f may have missed stores
// through a mapping (mapUnsure).
func (b *backing) unsure() bool { return b.mapping == mapUnsure }

// looked records a look at f's content (an ingest or an absorb) that
// found f mappable just before it (mapped) or not.
func (b *backing) looked(mapped bool) {
	switch {
	case mapped:
		b.mapping = mapUnsure
	case b.mapping == mapUnsure:
		b.mapping = mapShared
	}
}

// recyclable reports whether b's file may go back to the pool once
// dropped, as far as opens and stage records go: no open could map it,
// and no stage record names it (recycleBacking; the journal's own say is
// dropRecords').
func (b *backing) recyclable() bool { return b.mapping == mapNone && !b.pinned }

// mappable reports whether a shared writable mapping may still write
// b's file: an O_RDWR passthrough open joined it, and a passthrough handle
// is still open, or the file is still open somewhere the daemon cannot see
// (a mapping keeps the kernel's open of the backing file after its
// descriptor closed). A store through such a mapping into a page already
// dirty changes neither the file's size nor its times, so no fingerprint
// shows it, and it would reach a dropped backing file nowhere. Called with
// the node's mu held.
func (b *backing) mappable() bool {
	return b.mapping >= mapShared && (b.opens > 0 || openElsewhere(b.f))
}

// openElsewhere reports whether f's file is open for writing other than
// through f, by asking for a write lease, which the kernel grants only to
// the one open that writes the file (and then giving it back at once). It
// errs towards true.
func openElsewhere(f *os.File) bool {
	fd := f.Fd()
	if _, err := unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		return true
	}
	_, _ = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_UNLCK)
	return false
}

// backingDir holds the backing files of session s under the store
// directory, each under a name of its own from birth (makeBackingFile);
// a new daemon seals what an earlier one left, replays the journal, whose
// live and stage records name files there, and removes the rest.
func backingDir(storeDir, session string) string {
	return filepath.Join(storeDir, "backing", session)
}

// spare is an empty backing file in a session's pool, with its name and
// fingerprint, taken off the path of the open it serves.
type spare struct {
	f    *os.File
	name string
	fp   fingerprint
}

// dropSpare closes sp's file and removes its name: no journal record
// reads a file in the pool (dropRecords).
func (s *Session) dropSpare(sp spare) {
	sp.f.Close()
	s.removeBackingNames([]string{sp.name})
}

// newBackingFile returns an empty file in the backing directory, from
// the session's pool of empty ones when it has one ready: making the file
// costs an ext4 inode (20-50 µs here, far more while many were freed in
// the last minute), which a writer of a small file would otherwise wait
// for in its create. With an empty pool it makes one only if create is set,
// and returns a zero spare otherwise; either way the pool is topped up.
//
// The first open to find the pool parked (emptied by parkIdle) makes its
// file itself, as one with create set does: an idle session that starts
// writing again stages its first file too.
func (s *Session) newBackingFile(create bool) (spare, error) {
	sp, ok, fill, woke := s.spares.take(time.Now())
	if fill {
		// Counted, so that a session's close waits for the files it
		// makes (closeBackings).
		s.workers.start(s.fillBackingPool)
	}
	if ok || !(create || woke) {
		return sp, nil
	}
	return s.makeSpare()
}

// sparePool is a session's empty backing files made ahead of the opens
// that take them (newBackingFile); filling is set while a goroutine tops
// it up. closed is the pool's own, not the session's workers': whoever
// adds a file to the pool (recycleBacking, fillBackingPool) checks it
// under the lock it appends under, the lock close takes the pool under,
// so that no file lands in the pool after close took it, where nothing
// would ever close it.
//
// used is when the pool last gave or took a file, or was filled; parked
// is set while parkIdle emptied it and no open has asked for a file since.
type sparePool struct {
	mu      sync.Mutex
	spares  []spare // GUARDED_BY(mu)
	filling bool    // GUARDED_BY(mu)
	closed  bool    // GUARDED_BY(mu)
	used    int64   // Unix nanoseconds; GUARDED_BY(mu)
	parked  bool    // GUARDED_BY(mu)
}

// take returns the last spare of the pool, if it has one (ok), and fill
// reports whether the caller is to start topping the pool up: it is empty
// or less than half full, and no fill runs yet. woke reports that the pool
// was parked: the caller is the first to want a file since.
func (p *sparePool) take(now time.Time) (sp spare, ok, fill, woke bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.used = now.UnixNano()
	if k := len(p.spares); k > 0 {
		sp = p.spares[k-1]
		p.spares = p.spares[:k-1]
		return sp, true, k-1 < backingPool/2 && p.claimFill(), false
	}
	woke, p.parked = p.parked, false
	return spare{}, false, p.claimFill(), woke
}

// put adds sp to the pool unless the pool is closed or holds recycledPool
// files; it reports whether it did.
func (p *sparePool) put(sp spare) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.spares) >= recycledPool {
		return false
	}
	p.spares = append(p.spares, sp)
	p.used, p.parked = time.Now().UnixNano(), false
	return true
}

// idle empties the pool and parks it if it was not used for idle as of
// now and no fill runs, and returns the spares it held.
func (p *sparePool) idle(now time.Time, idle time.Duration) []spare {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.filling || p.closed || p.parked || now.UnixNano()-p.used < idle.Nanoseconds() {
		return nil
	}
	spares := p.spares
	p.spares, p.parked = nil, true
	return spares
}

// claimFill reports whether the caller is to top the pool up, and then
// marks a fill as running. Called with p.mu held.
func (p *sparePool) claimFill() bool {
	if p.filling || p.closed {
		return false
	}
	p.filling = true
	return true
}

// wants reports whether the running fill is to make one more spare, and
// ends the fill if not.
func (p *sparePool) wants() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.spares) >= backingPool {
		p.filling = false
		return false
	}
	return true
}

// filled adds the spare the running fill made (err: failed to), and
// reports whether it did; if not, the fill ends.
func (p *sparePool) filled(sp spare, err error) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil || p.closed {
		p.filling = false
		return false
	}
	p.spares = append(p.spares, sp)
	p.used, p.parked = time.Now().UnixNano(), false
	return true
}

// trim takes the spares past the first keep out of the pool and returns
// them.
func (p *sparePool) trim(keep int) []spare {
	p.mu.Lock()
	defer p.mu.Unlock()
	var extra []spare
	if len(p.spares) > keep {
		extra = append(extra, p.spares[keep:]...)
		p.spares = p.spares[:keep]
	}
	return extra
}

// close closes the pool, which takes no spare from then on, and returns
// the spares it held.
func (p *sparePool) close() []spare {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	spares := p.spares
	p.spares = nil
	return spares
}

// backingPool is how many empty backing files a session keeps ready (made
// from its first new file on), and recycledPool how many it keeps
// at most, until the next periodic flush trims the pool: over an
// untar the absorber gives staging files back a few hundred files behind
// the writer, and with a pool of 8 about a third of the files go
// unstaged for want of one.
const (
	backingPool  = 32
	recycledPool = 256
)

// defaultIdleAfter is Options.IdleAfter's default: two periodic flushes.
const defaultIdleAfter = 10 * time.Second

// recycleBacking empties a backing file no open uses and puts it back in
// the pool, rather than closing it: a new ext4 inode is dear where a file
// is made and dropped per file written (untar), since without a journal
// ext4 skips every inode freed in the last minute, one at a time, when it
// allocates one (recently_deleted in ialloc.c); that scan, growing with
// the files just dropped, was a third of the daemon's time in an untar.
//
// Only a file that no open could map is recycled: every passthrough open
// of it was write-only (mmap needs read access), so nothing can reach its
// blocks once the last is closed. A file a stage record names is not
// either (backing.pinned), nor one a live record names whose content the
// journal could not take (dropRecords).
func (s *Session) recycleBacking(sp spare) {
	f := sp.f
	fp, err := fingerprintOf(f)
	if err != nil {
		s.dropSpare(sp)
		return
	}
	if fp.size > 0 {
		if err := f.Truncate(0); err != nil {
			s.dropSpare(sp)
			return
		}
		// ext4 takes a truncate to size 0 for the first half of a replace
		// (auto_da_alloc) and writes the file back at its next close: the
		// kernel's close of the next writer's passthrough open, which would
		// wait for the disk. Any close clears that: one of a second open
		// here (a bare descriptor: os.Open would try, and fail, to add a
		// regular file to the poller, four more system calls a file).
		if fd, err := unix.Open(procPath(f), unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
			unix.Close(fd)
		}
		if fp, err = fingerprintOf(f); err != nil {
			s.dropSpare(sp)
			return
		}
	}
	sp.fp = fp
	if !s.spares.put(sp) {
		s.dropSpare(sp)
	}
}

// parkIdle closes what an idle session keeps open ahead of need: its
// pool of staging files, unused for idle, and its journal, empty and
// unused for idle. The next new file or fsync opens them again (take,
// journal.unpark): an idle mount then holds no descriptor of its own
// but its connection's.
func (s *Session) parkIdle(now time.Time, idle time.Duration) {
	for _, sp := range s.spares.idle(now, idle) {
		s.dropSpare(sp)
	}
	if s.journal != nil {
		s.journal.park(now, idle)
	}
}

// trimBackingPool closes the staging files a session keeps ready beyond
// backingPool: the pool grows past it over a burst of new files (as many
// as the absorber has yet to give back), and each holds a descriptor.
func (s *Session) trimBackingPool() {
	for _, sp := range s.spares.trim(backingPool) {
		s.dropSpare(sp)
	}
}

// fillBackingPool tops the pool up; one runs at a time (sparePool.filling).
func (s *Session) fillBackingPool() {
	for s.spares.wants() {
		sp, err := s.makeSpare()
		if !s.spares.filled(sp, err) {
			if sp.f != nil {
				s.dropSpare(sp)
			}
			return
		}
	}
}

// makeSpare makes an empty backing file and takes its fingerprint.
func (s *Session) makeSpare() (spare, error) {
	f, name, err := s.makeBackingFile()
	if err != nil {
		return spare{}, err
	}
	fp, err := fingerprintOf(f)
	if err != nil {
		s.dropSpare(spare{f: f, name: name})
		return spare{}, err
	}
	return spare{f: f, name: name, fp: fp}, nil
}

// makeBackingFile makes an empty file in the backing directory and
// returns it with its name. The name comes with the inode rather than
// when a journal record first needs it: a live record then costs no
// directory operation on the open's path, and a recycled file keeps its
// name (see dropRecords).
func (s *Session) makeBackingFile() (*os.File, string, error) {
	var f *os.File
	name, err := s.nameBacking(func(path string) error {
		// O_NOATIME: the daemon's reads of the file leave its atime to
		// the passthrough readers' (atime.go).
		fd, err := unix.Open(path, unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOATIME, 0o600)
		if err == nil {
			f = os.NewFile(uintptr(fd), path)
		}
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("create backing file: %w", err)
	}
	return f, name, nil
}

// nameBacking gives a file a new name of this daemon's in the backing
// directory, which it makes first if need be: place puts the file at the
// path it is given, failing with EEXIST where a file is (left by an
// earlier daemon and not removable), and the next name is tried.
func (s *Session) nameBacking(place func(path string) error) (string, error) {
	if !s.backed.dirMade.Load() {
		if err := os.MkdirAll(s.backingDir, 0o700); err != nil {
			return "", fmt.Errorf("backing directory: %w", err)
		}
		s.backed.dirMade.Store(true)
	}
	for {
		name := fmt.Sprintf("%s-%d", s.backed.namePrefix(), s.backed.seq.Add(1))
		err := place(filepath.Join(s.backingDir, name))
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			return "", err
		}
		return name, nil
	}
}

// procPath names f's open file in /proc.
func procPath(f *os.File) string { return fmt.Sprintf("/proc/self/fd/%d", f.Fd()) }

// errNoStagingFile: the pool had no staging file ready for a new file.
var errNoStagingFile = errors.New("no staging file ready")

// route is the write route an open takes (doc.go's table).
type route int

const (
	// routeDaemon: the daemon serves the descriptor.
	routeDaemon route = iota
	// routeAppender: a write-only appender passes through to the node's
	// backing file, a copy of the content made if it has none.
	routeAppender
	// routeStaged: a write-only writer of an empty file passes through to
	// a new staging file (staged.go).
	routeStaged
	// routeJoin: the descriptor passes through to the backing file that
	// the mount's passthrough descriptors of the node use (a copy of the
	// content made if the node has none), or, for a reader of a staged
	// file, to the staging file.
	routeJoin
	// routeWild: routeJoin for a descriptor that may write before the end
	// of a backing file that is not a staging file, or map it: the backing
	// file turns wild.
	routeWild
)

// joins reports whether r joins the passthrough descriptors a mount has
// of the node.
func (r route) joins() bool { return r == routeJoin || r == routeWild }

// mountOpens is what one mount has open of a node, which the route of its
// next open of the node depends on.
type mountOpens struct {
	all, pt int // open handles, and the passthrough ones among them
	// releasing counts the mount's RELEASE requests being served; read
	// only for a first passthrough open.
	releasing *atomic.Int32
	// daemonIfRemote: a first passthrough open whose copy of the content
	// needs a remote falls back to the daemon, rather than failing with
	// cas.ErrNotLocal.
	daemonIfRemote bool
	// jid is the node's journal id, for a writer's open (0 for none):
	// the live record of its backing file names it (liveBacking).
	jid uint64
	// claim is a parked copy the open claimed for the node (claimParked),
	// or nil.
	claim *parkedClaim
}

// openRoute chooses the route of an open of n with flags in a mount that
// has o open of n and, for a passthrough route, opens n's backing file for
// it, whose descriptor it returns. The kernel fails an open of an inode
// that has passthrough opens unless it is passthrough too, so: while the
// mount has passthrough opens of the node every open joins them; with no
// open at all, n.eligible says; otherwise the daemon serves the open.
// Passthrough does not start while a release is in flight in the mount:
// go-fuse gives back the backing id of a node's last passthrough handle
// only after the handle's Release returned, and an open handed that id in
// between would leave the node with an id the kernel refuses for its next
// open. A first passthrough open whose backing file cannot be had (no
// staging file ready, a full disk) falls back to the daemon, which can
// serve it; an error is a joining open's backing file's, which cannot, or
// a copy of the content that needs a remote under cas.LocalOnly
// (fnode.open fetches it with no lock held, and opens again).
// Called with freeze held shared (for a writable session) and the mount's
// fnode.openMu held.
func (s *Session) openRoute(ctx context.Context, n *node, flags uint32, o mountOpens) (route, int, error) {
	if n.kind != manifest.KindFile || o.pt == 0 && o.all > 0 {
		return routeDaemon, 0, nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	r := routeJoin
	switch {
	case o.pt > 0:
		if b := n.data.backing; (b == nil || !b.isStaged()) && scribbles(flags) {
			r = routeWild
		}
	case o.releasing.Load() != 0:
		r = routeDaemon
	default:
		r = n.eligible(flags)
		if r == routeDaemon && o.claim != nil && n.installClaim(ctx, o.claim) {
			// A reader of a file whose copy an earlier daemon parked.
			r = routeJoin
		}
	}
	if r == routeDaemon {
		return r, 0, nil
	}
	b, err := n.openBacking(ctx, r)
	switch {
	case err != nil && (r.joins() || errors.Is(err, cas.ErrNotLocal) && !o.daemonIfRemote):
		return r, 0, err
	case err != nil:
		if !errors.Is(err, errNoStagingFile) && !errors.Is(err, cas.ErrNotLocal) {
			s.log.Warn("no passthrough for a writer", "session", s.name, "err", err)
		}
		return routeDaemon, 0, nil
	}
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		// Its writes pass the daemon by: a crash must find the file.
		s.liveBacking(n, b, o.jid)
	}
	b.join(flags, r)
	return r, int(b.f.Fd()), nil
}

// closeRoute undoes, for a passthrough handle of n closing, what
// openRoute did. The last passthrough handle of a staged file, in every
// mount, hands it to the absorber, so that a flush (which holds writers
// back) seldom has to absorb it; a read copy that only readers opened
// since it was kept is as it was, and the absorber drops it only if the
// file lost its names. Called with the mount's fnode.openMu held.
func (s *Session) closeRoute(n *node) {
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.data.backing
	if b == nil {
		return
	}
	b.opens--
	if b.opens == 0 && b.isStaged() {
		if b.kind != backingKept {
			s.markChanged(n)
		}
		s.absorbLater(n)
	}
}

// serveOpen readies n, a file, for an open the daemon serves, and returns
// the content generation that the pages the open caches are read at, or 0
// if they may miss a write. The daemon takes over a backing file no
// passthrough handle uses any more, rather than ingesting it at every
// request until a flush drops it. While a writer has the file open, in any
// mount, a page this open caches can miss its write: the kernel may read a
// page whose append it holds but has not sent yet, so the appended bytes
// read as the zeros past the old end, until an open drops the page. Such
// an open neither keeps pages nor lets the next one keep what it cached
// (TestJSONLAppend's reader). Nor does an open of a node with a backing
// file: passthrough writes change the content where the daemon sees it
// only at the next ingest. Called as openRoute is.
func (s *Session) serveOpen(ctx context.Context, n *node) (uint64, error) {
	if !s.readOnly {
		n.mu.Lock()
		err := n.takeOver(ctx)
		n.mu.Unlock()
		if err != nil {
			return 0, err
		}
	}
	busy := !s.readOnly && s.writing.has(n)
	n.mu.Lock()
	gen := n.contentGen()
	if n.data.backing != nil || busy {
		gen = 0
	}
	n.mu.Unlock()
	return gen, nil
}

// opened counts an open with flags of n, a file of a writable session, in
// s.open and, if it writes, in s.writing; it reports whether it writes.
func (s *Session) opened(n *node, flags uint32) bool {
	s.open.add(n)
	if flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		return false
	}
	s.writing.add(n)
	return true
}

// released undoes opened for a handle of n closing (writes is what opened
// reported), and drops the buffers of a file with no name at its last
// close.
func (s *Session) released(n *node, writes bool) {
	s.open.remove(n)
	if writes {
		s.writing.remove(n)
	}
	if !s.open.has(n) && !s.hasName(n) {
		// The last handle of a file with no name (O_TMPFILE, or
		// unlinked): nothing can reach its buffers any more. Its backing
		// file, if any, goes with the absorber or the flush.
		n.dropBuffers()
	}
}

// scribbles reports whether a descriptor opened with flags may write
// before the end of its file, or map it.
func scribbles(flags uint32) bool {
	acc := flags & syscall.O_ACCMODE
	return acc != syscall.O_RDONLY && flags&syscall.O_APPEND == 0 || acc == syscall.O_RDWR
}

// eligible returns the route of the first open with flags of n in a
// mount: a write-only appender of a file up to maxBacked bytes passes
// through, as does a write-only writer of an empty file (staged.go) and a
// reader of a staged file. Called with n.mu held.
func (n *node) eligible(flags uint32) route {
	if !n.passable() {
		return routeDaemon
	}
	if b := n.data.backing; b != nil && b.isStaged() && flags&syscall.O_ACCMODE == syscall.O_RDONLY {
		// A reader of a staged file reads the staging file, rather than
		// making the daemon take the content over.
		return routeJoin
	}
	if flags&syscall.O_ACCMODE != syscall.O_WRONLY {
		return routeDaemon
	}
	if flags&syscall.O_DSYNC != 0 {
		// O_SYNC and O_DSYNC (which O_SYNC includes) make each write
		// durable before it returns. A passed-through write would be
		// durable in the backing file only, which a crash discards, and
		// the daemon would not even hear of it; served by the daemon,
		// each write is followed by the kernel's FSYNC.
		return routeDaemon
	}
	if flags&syscall.O_APPEND == 0 {
		if n.data.backing == nil && n.data.size == 0 && n.sess.stagingOK() {
			return routeStaged
		}
		return routeDaemon
	}
	if n.data.backing != nil || n.data.size <= maxBacked {
		return routeAppender
	}
	return routeDaemon
}

// openBacking returns n's backing file, making one if n has none: an
// empty staging file for route r routeStaged, a copy of the content for
// any other. Called with n.mu held.
func (n *node) openBacking(ctx context.Context, r route) (*backing, error) {
	d := n.data
	if d.backing != nil {
		return d.backing, nil
	}
	// A file written write-only from empty is staged only with a staging
	// file ready: the daemon serves it as fast as a new inode would come.
	sp, err := n.sess.newBackingFile(r != routeStaged)
	if err != nil {
		return nil, err
	}
	if sp.f == nil {
		return nil, errNoStagingFile
	}
	f := sp.f
	if r == routeStaged {
		fp := sp.fp
		d.backing = &backing{f: f, name: sp.name, kind: backingStaged, absorbed: fp, mtime: fp.mtime}
		n.sess.backed.add(n)
		return d.backing, nil
	}
	st, err := n.fillBacking(ctx, f)
	if err != nil {
		n.sess.dropSpare(sp)
		return nil, err
	}
	d.backing = &backing{f: f, name: sp.name, kind: backingAppender, ingested: d.size, mtime: st.ModTime().UnixNano()}
	n.sess.backed.add(n)
	return d.backing, nil
}

// fillBacking copies n's content into f, a new backing file, and returns
// f's state after. Called with n.mu held.
func (n *node) fillBacking(ctx context.Context, f *os.File) (os.FileInfo, error) {
	if err := n.copyOut(ctx, f, 0, n.data.size); err != nil {
		return nil, err
	}
	if err := f.Truncate(n.data.size); err != nil {
		return nil, fmt.Errorf("size backing file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("backing file: %w", err)
	}
	return st, nil
}

// ingest folds what passthrough writers added to n's backing file into n.
// Called with freeze held (shared or exclusive) and n.mu held; it reports
// the backing file's size.
func (n *node) ingest(ctx context.Context) (int64, error) {
	d := n.data
	b := d.backing
	if b == nil {
		return d.size, nil
	}
	if b.isStaged() {
		// The daemon is about to use the content itself.
		if err := n.unstage(ctx); err != nil {
			return 0, err
		}
	}
	if b.kind == backingWild && n.sess.stagingOK() {
		// Fingerprints tell whether anything changed, and what did.
		fp, err := n.absorb(ctx)
		return fp.size, err
	}
	mapped := b.mappable()
	st, err := b.f.Stat()
	if err != nil {
		return 0, fmt.Errorf("backing file: %w", err)
	}
	size, mtime := st.Size(), st.ModTime().UnixNano()
	from := b.ingested
	if b.kind == backingWild {
		from = 0
	}
	from = min(from, size)
	if size > from || mtime != b.mtime || b.unsure() || mapped {
		buf := make([]byte, min(size-from, 1<<20))
		for off := from; off < size; {
			k, err := b.f.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
			if k == 0 && err != nil && !errors.Is(err, io.EOF) {
				return 0, fmt.Errorf("read backing file: %w", err)
			}
			if k == 0 {
				break
			}
			if err := n.writeAt(ctx, buf[:k], off); err != nil {
				return 0, err
			}
			n.sess.markWritten(n, off, off+int64(k))
			off += int64(k)
		}
		if size < d.size {
			if err := n.truncate(ctx, size); err != nil {
				return 0, err
			}
			n.sess.markDirty(n)
		}
		// Privileges set since the open were dropped when the writer
		// wrote: the kernel asks for it (an empty SETATTR, Setattr).
		if mtime != b.mtime {
			n.wroteAt(mtime)
		}
		b.ingested, b.mtime, b.fresh = size, mtime, true
		b.looked(mapped)
		if err := n.sess.maybeSpill(ctx, n, -1); err != nil {
			return 0, err
		}
	}
	return size, nil
}

// ingestNode ingests n if it has a backing file, holding off a flush
// meanwhile; it reports whether n has one.
func (s *Session) ingestNode(ctx context.Context, n *node) (bool, error) {
	if n.kind != manifest.KindFile || s.readOnly {
		return false, nil
	}
	n.mu.Lock()
	has := n.data.backing != nil
	n.mu.Unlock()
	if !has {
		return false, nil
	}
	s.freeze.RLock()
	defer s.freeze.RUnlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	_, err := n.ingest(ctx)
	return true, err
}

// writeThrough repeats a change the daemon made to n's content in
// [off, end) in its backing file, so that passthrough readers and writers
// see it; truncated says the change set the size, which the backing file
// then takes too. Only a truncate may cut the backing file: passthrough
// writers in another mount of the session (a second kernel inode, which
// the kernel does not serialize with this request) may have appended to
// it since the daemon last looked, and those bytes are theirs. Called
// with n.mu held, after the change.
func (n *node) writeThrough(ctx context.Context, off, end int64, truncated bool) error {
	d := n.data
	b := d.backing
	if b == nil {
		return nil
	}
	if truncated {
		if err := b.f.Truncate(d.size); err != nil {
			return fmt.Errorf("backing file: %w", err)
		}
	}
	if err := n.copyOut(ctx, b.f, off, min(end, d.size)); err != nil {
		return err
	}
	st, err := b.f.Stat()
	if err != nil {
		return fmt.Errorf("backing file: %w", err)
	}
	b.ingested, b.mtime = d.size, st.ModTime().UnixNano()
	return nil
}

// copyOut writes n's content in [off, end) into f at the same offsets,
// its holes as holes (writeOut). Called with n.mu held.
func (n *node) copyOut(ctx context.Context, f *os.File, off, end int64) error {
	if off >= end {
		return nil
	}
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("backing file: %w", err)
	}
	fsize := st.Size()
	buf := make([]byte, min(end-off, 1<<20))
	for off < end {
		k, err := n.readAt(ctx, buf[:min(int64(len(buf)), end-off)], off)
		if err != nil {
			return fmt.Errorf("copy into backing file: %w", err)
		}
		if k == 0 {
			return nil
		}
		if err := n.writeOut(f, buf[:k], off, &fsize); err != nil {
			return err
		}
		off += int64(k)
	}
	return nil
}

// backedSet is the session's nodes that have a backing file, and the
// state of its backing directory: the names in it to remove, whether it
// exists and whether its name is durable. The pool of empty backing files
// (sparePool), the absorber's queue (absorbQueue) and the goroutines that
// use the store (workers) have locks of their own.
type backedSet struct {
	mu    sync.Mutex
	nodes map[*node]struct{} // GUARDED_BY(mu)
	// stale names staging files to remove at the next journal reset.
	stale []string // GUARDED_BY(mu)
	// dirMade is set once the backing directory exists, dirSynced once its
	// name is durable; seq numbers backing file names (makeBackingFile).
	dirMade   atomic.Bool
	dirSynced atomic.Bool
	seq       atomic.Uint64
	// prefix starts the names of this daemon's backing files (the time
	// the first was made): an earlier daemon's, sealed by the load and
	// still there, keep theirs (sealBackingDir).
	prefixOnce sync.Once
	prefix     string
}

// namePrefix returns the prefix of this daemon's backing file names.
func (b *backedSet) namePrefix() string {
	b.prefixOnce.Do(func() { b.prefix = strconv.FormatInt(time.Now().UnixNano(), 36) })
	return b.prefix
}

func (b *backedSet) add(n *node) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.nodes == nil {
		b.nodes = make(map[*node]struct{})
	}
	b.nodes[n] = struct{}{}
}

func (b *backedSet) remove(n *node) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.nodes, n)
}

// list returns the nodes with a backing file as of now.
func (b *backedSet) list() []*node {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]*node, 0, len(b.nodes))
	for n := range b.nodes {
		out = append(out, n)
	}
	return out
}

// clear forgets every node (their backing files are closed).
func (b *backedSet) clear() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nodes = nil
}

// addStale records a staging file name to remove at the next journal
// reset.
func (b *backedSet) addStale(name string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stale = append(b.stale, name)
}

func (b *backedSet) hasStale() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.stale) > 0
}

// takeStale returns the names addStale recorded, and forgets them.
func (b *backedSet) takeStale() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	stale := b.stale
	b.stale = nil
	return stale
}

// workers counts the goroutines that use the store or the backing
// directory for a session (the absorber, a background spill, a fill of
// the pool of staging files): one starts only while the session is open,
// and the session's closer waits for them before the store may go.
type workers struct {
	mu     sync.Mutex
	closed bool // GUARDED_BY(mu)
	wg     sync.WaitGroup
}

// start runs fn in a goroutine of its own, counted, unless the session is
// closed; it reports whether it did.
func (w *workers) start(fn func()) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		fn()
	}()
	return true
}

// isClosed reports whether close was called.
func (w *workers) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// close lets no more goroutines start; wait then waits for those started.
func (w *workers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}

func (w *workers) wait() { w.wg.Wait() }

// exactPasses bounds the passes ingestAll makes to find one instant.
const exactPasses = 4

// ingestAll ingests every backed node of s, again until a pass finds none
// changed: each backed file then held what it was ingested with from its
// ingest to the check, an interval that contains the last ingest, so at
// that instant the session was exactly what the flush stores (everything
// else is frozen). Appenders are checked by size, files ingested whole
// (staged and wild ones) by fingerprint. Staged files are absorbed when
// all is set, when closed, or when fsynced (staged.go).
//
// Passthrough writers are not held back by the freeze, so one that never
// pauses could keep every pass from finding an instant; after exactPasses
// the flush goes ahead with each such file as its last pass read it: an
// appender's as a prefix of what it appended (a state it had), a file
// written in place with each chunk as it was when read. A capture then
// still succeeds while a download or a log is being written.
//
// Backing files no open uses any more are dropped, once they hold what
// their node took from them (ingestedAsIs). Called with freeze held
// exclusively.
func (s *Session) ingestAll(ctx context.Context, all bool) error {
	nodes := s.backed.list()
	if len(nodes) == 0 {
		return nil
	}
	absorbed := make(map[*node]bool)
	named := make(map[*node]bool, len(nodes))
	s.treeMu.Lock()
	for _, n := range nodes {
		named[n] = n.nlink > 0
	}
	s.treeMu.Unlock()
	for pass := 1; ; pass++ {
		changed, err := s.ingestPass(ctx, nodes, all, named, absorbed)
		if err != nil {
			return err
		}
		if len(changed) == 0 {
			break
		}
		if pass == exactPasses {
			// Writers the freeze cannot hold back kept writing: each of
			// their files is held as the last pass read it (see above).
			s.log.Warn("files written through the flush are held as last read", "session", s.name, "inodes", changed)
			break
		}
	}
	if hook := s.afterChecks.Load(); hook != nil {
		(*hook)()
	}
	// A passthrough writer is not held back by the freeze, nor is its
	// release: it may have written and closed its file since the last
	// pass looked. Such a file keeps its backing file, whose bytes the
	// next ingest takes (the absorber, for a staged file: its release
	// queued it), and this flush what the passes found. Only a file no
	// one can reach any more (no name, no handle) is dropped unread. Read
	// copies stay while the disk has room for them (Read copies, staged.go).
	keepRoom := s.keepRoom()
	for _, n := range nodes {
		gone := !named[n] && !s.open.has(n)
		n.mu.Lock()
		n.dropIdleBacking(gone, absorbed[n], keepRoom)
		n.mu.Unlock()
	}
	return nil
}

// ingestPass is one of ingestAll's passes: it ingests nodes, then checks
// which of them changed since, whose inode numbers it returns.
func (s *Session) ingestPass(ctx context.Context, nodes []*node, all bool, named, absorbed map[*node]bool) ([]uint64, error) {
	var checks []func() (bool, error)
	var checked []*node
	for _, n := range nodes {
		n.mu.Lock()
		check, err := n.ingestForFlush(ctx, all, named[n], absorbed)
		n.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if check != nil {
			checks = append(checks, check)
			checked = append(checked, n)
		}
	}
	var changed []uint64
	for i, check := range checks {
		c, err := check()
		if err != nil {
			return nil, err
		}
		if c {
			changed = append(changed, checked[i].ino)
		}
	}
	return changed, nil
}

// dropIdleBacking drops n's backing file after ingestAll's passes if no
// open uses it and it is not worth keeping: gone (n has no name and no
// handle), or holding what n took from it; a staged file only if this
// flush absorbed it, and a read copy only if there is no room to keep it.
// Called with n.mu held.
func (n *node) dropIdleBacking(gone, absorbed, keepRoom bool) {
	b := n.data.backing
	if b == nil || b.opens > 0 {
		return
	}
	switch {
	case gone:
		n.dropBacking()
	case b.isStaged():
		if absorbed && n.ingestedAsIs() && !(b.kind == backingKept && keepRoom && b.stage.keptEpoch == n.sess.keepEpoch.Load()) {
			n.dropBacking()
		}
	case b.fresh:
		// Appended since the flush before: a transcript written an
		// entry at a time, each through an open of its own, is
		// kept, so that the next entry's open does not copy the
		// whole file out again. A flush that finds it idle drops it.
		b.fresh = false
	case n.ingestedAsIs():
		n.dropBacking()
	}
}

// appendersDue reports whether a backing file that is not staged (an
// appender's) holds bytes its node has not taken yet, or no handle uses it
// any more: the daemon never saw those writes, so nothing marked the
// session dirty for the periodic flush, which also drops the backing files
// closed and idle (ingestAll). (A staged file is marked when its last
// handle closes, and the periodic flush absorbs it only then.)
func (s *Session) appendersDue() bool {
	for _, n := range s.backed.list() {
		n.mu.Lock()
		b := n.data.backing
		due := b != nil && !b.isStaged() && (b.opens == 0 || !n.ingestedAsIs())
		n.mu.Unlock()
		if due {
			return true
		}
	}
	return false
}

// ingestedAsIs reports whether n's backing file still holds what n last
// took from it (by fingerprint, or for an appender by size and mtime).
// Called with n.mu held.
func (n *node) ingestedAsIs() bool {
	b := n.data.backing
	if b.unsure() || b.mappable() {
		return false
	}
	if b.isStaged() || b.kind == backingWild && n.sess.stagingOK() {
		fp, err := fingerprintOf(b.f)
		return err == nil && fp == b.absorbed
	}
	st, err := b.f.Stat()
	return err == nil && st.Size() == b.ingested && st.ModTime().UnixNano() == b.mtime
}

// ingestForFlush ingests n for ingestAll and returns the check that n has
// not changed since, or nil when n is left as it is (a staged file this
// flush does not absorb). Called with freeze held exclusively and n.mu
// held.
func (n *node) ingestForFlush(ctx context.Context, all, named bool, absorbed map[*node]bool) (func() (bool, error), error) {
	b := n.data.backing
	if b == nil {
		return nil, nil
	}
	n.sawReadsNow() // the flush holds what passthrough readers read
	if b.isStaged() && !absorbed[n] && !b.absorbDue(all, named) {
		return nil, nil
	}
	if b.isStaged() || b.kind == backingWild && n.sess.stagingOK() {
		fp, err := n.absorb(ctx)
		if err != nil {
			return nil, err
		}
		if b.isStaged() {
			absorbed[n] = true
			b.stage.fsynced = false // the head this flush makes holds it
		}
		return func() (bool, error) {
			now, err := fingerprintOf(b.f)
			return now != fp, err
		}, nil
	}
	size, err := n.ingest(ctx)
	if err != nil {
		return nil, err
	}
	return func() (bool, error) {
		st, err := b.f.Stat()
		if err != nil {
			return false, fmt.Errorf("backing file: %w", err)
		}
		return st.Size() != size, nil
	}, nil
}

// takeOver ingests and drops n's backing file if no passthrough handle
// uses it. Called with freeze held shared and n.mu held.
func (n *node) takeOver(ctx context.Context) error {
	dispose, err := n.detachIngested(ctx)
	if dispose != nil {
		go dispose()
	}
	return err
}

// detachIngested is takeOver but for the backing file's disposal, which
// it returns (nil if n kept its backing file) for the caller to run once
// it holds no lock.
func (n *node) detachIngested(ctx context.Context) (dispose func(), err error) {
	b := n.data.backing
	if b == nil || b.opens > 0 {
		return nil, nil
	}
	if _, err := n.ingest(ctx); err != nil {
		return nil, err
	}
	if b.unsure() {
		// A mapping may still write it: flushes look at it until none can.
		return nil, nil
	}
	return n.detachBacking(), nil
}

// dropBacking closes or recycles n's backing file and forgets it. Called
// with n.mu held.
func (n *node) dropBacking() {
	// Truncating or closing frees the file's blocks: off the caller's path
	// (a flush holds every writer back).
	dispose := n.detachBacking()
	go dispose()
}

// detachBacking forgets n's backing file and returns what closes or
// recycles it, which the caller runs once it holds no lock. Called with
// n.mu held.
func (n *node) detachBacking() (dispose func()) {
	n.sawReadsNow()
	b := n.data.backing
	n.data.backing = nil
	n.sess.backed.remove(n)
	if n.sess.dropRecords(n, b) {
		return func() { n.sess.recycleBacking(spare{f: b.f, name: b.name}) }
	}
	// A journal record may read the file until the next reset.
	n.sess.backed.addStale(b.name)
	return func() { b.f.Close() }
}

// closeBackings closes every backing file (the session is going away).
// With clean set (the final flush made everything durable) and a journal
// that holds no record (none reads a backing file: a live record of a
// file still open, or one a late absorb made, would), it also removes
// their names, but for files a writer may still reach (sealed at
// shutdown: their names keep them sealed until the next load,
// sealBackingDir); otherwise the next load replays and removes them.
// Clean, it parks the big staged files and read copies it can (parkCopy)
// instead. With gone set (the session is removed, and its journal with
// it) the journal's records do not matter: what it would remove or park
// clean, it does.
func (s *Session) closeBackings(clean, gone bool) {
	// The absorber first: it may still drop a file, and journal it. The
	// pool is closed before the wait, so that a fill running makes no
	// more files; the ones it made after close are its to remove.
	s.workers.close()
	spares := s.spares.close()
	s.workers.wait()
	clean = clean && (gone || s.journal == nil || !s.journal.holds())
	var names []string
	parked := false
	for _, n := range s.backed.list() {
		n.mu.Lock()
		if b := n.data.backing; b != nil {
			switch {
			case clean && s.parkCopy(n, b):
				parked = true
			case clean && b.opens == 0 && !b.mappable():
				names = append(names, b.name)
			}
			b.f.Close()
			n.data.backing = nil
		}
		n.mu.Unlock()
	}
	s.backed.clear()
	for _, sp := range spares {
		sp.f.Close()
		names = append(names, sp.name)
	}
	if clean {
		names = append(names, s.backed.takeStale()...)
	}
	s.removeBackingNames(names)
	if parked {
		s.parked.prune()
	}
}
