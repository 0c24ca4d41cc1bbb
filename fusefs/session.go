package fusefs

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Session is the live, writable state of one session: a tree of nodes
// loaded lazily from the stored root, plus the changes made since. Every
// mount of the session shares it.
type Session struct {
	name     string
	store    cas.Store
	chunks   *chunkCache
	readOnly bool
	inos     *atomic.Uint64
	log      logger

	// freeze is held shared by every operation that changes the tree or a
	// file, and exclusively by flush, so that a flush sees one point in
	// time across the whole session.
	freeze sync.RWMutex

	treeMu sync.Mutex
	root   *node            // GUARDED_BY(treeMu)
	links  map[uint64]*node // hard-linked files and symlinks by LinkID; GUARDED_BY(treeMu)

	dirtyMu sync.Mutex
	dirty   map[*node]struct{} // nodes whose entry changed; GUARDED_BY(dirtyMu)
	// atimes holds the nodes whose atime alone changed (atime.go): the
	// next flush stores them, which they do not make due.
	// GUARDED_BY(dirtyMu)
	atimes map[*node]struct{}
	// metaDirty is set by a change the journal does not hold (and by a
	// flush until the head holding it is durable): while it is set, the
	// journal takes no record and an fsync must flush, because a replay
	// must apply a prefix of the changes made since the durable head.
	// GUARDED_BY(dirtyMu)
	metaDirty bool
	// journal makes writes durable cheaply (journal.go); nil when the
	// engine has no store directory or the session is read-only.
	journal *journal
	// flushNow makes every change durable and moves the head to it
	// (Engine.syncPartial: the flush, the catalog's commit, durableAt):
	// the step of an fsync the journal cannot take, and of a write the
	// journal refused, before it is acknowledged. The engine sets it when
	// it makes the session live; nil for a read-only session.
	flushNow func(context.Context) error
	// soon is the engine's queue of sessions to flush at once
	// (flushSoon); soonAsked is set while s is in it.
	soon      chan<- *Session
	soonAsked atomic.Bool
	// replayed is what replaying the journal cost; written before the
	// session is shown, read-only after.
	replayed replayStats
	// pending holds chunks of batches not committed yet (see newBatch).
	pending pendingChunks
	// orphans keeps the chunks of batches whose commit failed (orphans.go).
	orphans orphans
	// backingDir holds the backing files of passthrough opens; empty for
	// none (no store directory). backed lists the nodes that have one,
	// spares holds empty ones made ahead, absorbs the closed staged files
	// the absorber is to take (staged.go).
	backingDir string
	backed     backedSet
	spares     sparePool
	absorbs    absorbQueue
	// parked are the store directory's parked read copies (parked.go);
	// nil where backingDir is empty.
	parked *parkedCopies
	// workers counts the goroutines that use the store or the backing
	// directory for the session: the absorber, a spill of its write
	// buffers (spillLater), which runs while spilling is set, and a fill
	// of the pool of staging files.
	workers  workers
	spilling atomic.Bool
	// staging says whether files may be staged (staged.go); noStage
	// turns it off.
	noStage bool
	staging struct {
		once sync.Once
		ok   bool
	}
	// afterChecks, for tests, runs in ingestAll once its passes found an
	// instant, before it drops backing files.
	afterChecks atomic.Pointer[func()]
	// afterClaim, for tests, runs in claimParked once a parked copy is
	// claimed, before its check.
	afterClaim atomic.Pointer[func()]
	// holdFor, for tests, replaces absorbHold (staged.go) when set, in
	// nanoseconds.
	holdFor atomic.Int64
	// keepEpoch counts the edits that took files out of the tree while
	// their nlink stayed (a restore, a directory grafted over or removed):
	// a read copy is kept only within the epoch its node was queued in.
	keepEpoch atomic.Uint64

	// dirtyBytes counts buffered file bytes across the session, and
	// buffers across the engine.
	dirtyBytes atomic.Int64
	buffers    *buffers
	// noRoom is set while roomFor refuses writes (logged when it changes).
	noRoom atomic.Bool
	// lastFlush is when the head last durably held every change, in Unix
	// nanoseconds (durableAt; at load, the head's own time).
	lastFlush atomic.Int64

	// open counts the open handles of each file, in every mount: gc keeps
	// the content of an open file that no head names any more (unlinked,
	// or replaced by a restore), which its handles still read.
	open openFiles
	// writing counts the handles open for writing, of each file (keep
	// cache: serveOpen).
	writing openFiles

	// flushed is the root stored by the last flush; synced the root the
	// session head durably holds, written with head generation gen.
	// GUARDED_BY(freeze, exclusive)
	flushed cas.Ref
	synced  cas.Ref
	gen     uint64
}

type logger interface {
	Error(msg string, args ...any)
	Warn(msg string, args ...any)
}

// spillThreshold is how many buffered bytes a file may hold before its
// dirty chunks move to the store (not durably) on the write path; it keeps
// memory bounded while a writer streams gigabytes.
const spillThreshold = 4 << 20

// overlaySpillThreshold is the same bound for a file's overlays: a 4 KiB
// page costs 4 KiB of overlay, so a file takes 4096 pages at random before
// they are stored.
const overlaySpillThreshold = 16 << 20

// sessionSpillThreshold is what a session's write buffers may hold (many
// small files written and not yet flushed) before they go to the store
// ahead of the next flush, once the daemon's buffers together are past
// their budget (buffers).
const sessionSpillThreshold = 64 << 20

// buffers accounts for the write buffers of every session of an engine.
// Below the budget a session's buffers wait for the next flush (the
// periodic one comes within seconds), so that a burst of writes (an
// untar, an install) is not hashed and compressed while it runs, on the
// CPUs it runs on; past it they are stored in the background, and past
// twice the budget by the writer itself.
type buffers struct {
	total  atomic.Int64
	budget int64
}

// bufferBudget is a sixteenth of the daemon's memory (memoryLimit),
// between sessionSpillThreshold and 1 GiB.
func bufferBudget() int64 {
	mem, ok := memoryLimit()
	if !ok {
		return sessionSpillThreshold
	}
	return min(max(mem/16, sessionSpillThreshold), 1<<30)
}

// memoryLimit is the machine's memory, or the memory limit of the daemon's
// cgroup when that is lower: in a container the machine's figure is the
// host's.
func memoryLimit() (int64, bool) {
	mem, ok := int64(math.MaxInt64), false
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		mem, ok = int64(si.Totalram)*int64(si.Unit), true
	}
	if self, err := os.ReadFile("/proc/self/cgroup"); err == nil {
		if limit, found := cgroupMemoryLimit(string(self), "/sys/fs/cgroup"); found && limit < mem {
			mem, ok = limit, true
		}
	}
	return mem, ok
}

// cgroupMemoryLimit reads the memory limit of the cgroup that self (the
// content of /proc/self/cgroup) names, from the cgroup filesystem at root:
// memory.max (v2), or memory.limit_in_bytes of the memory controller (v1).
// A v2 cgroup without a limit says "max": none found; a v1 one says a huge
// number, above any machine's memory.
func cgroupMemoryLimit(self, root string) (int64, bool) {
	for _, line := range strings.Split(self, "\n") {
		// id:controllers:path; cgroup v2 lists no controllers.
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		var file string
		switch {
		case f[0] == "0" && f[1] == "":
			file = filepath.Join(root, f[2], "memory.max")
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			file = filepath.Join(root, "memory", f[2], "memory.limit_in_bytes")
		default:
			continue
		}
		b, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
			return v, true
		}
	}
	return 0, false
}

func newSession(name string, store cas.Store, cache *chunkCache, inos *atomic.Uint64, bufs *buffers, root cas.Ref, readOnly bool, log logger) *Session {
	s := &Session{
		name:     name,
		store:    store,
		chunks:   cache,
		readOnly: readOnly,
		inos:     inos,
		buffers:  bufs,
		log:      log,
		links:    make(map[uint64]*node),
		dirty:    make(map[*node]struct{}),
		atimes:   make(map[*node]struct{}),
		flushed:  root,
		synced:   root,
	}
	// The pool is filled on first need (newBackingFile), not at mount: a
	// mount nobody writes holds no staging file.
	s.spares.parked = true
	now := time.Now().UnixNano()
	s.root = &node{ino: inos.Add(1), kind: manifest.KindDir, sess: s, tree: root, mode: 0o755, mtime: now, ctime: now, atime: now}
	return s
}

// Name is the session's name.
func (s *Session) Name() string { return s.name }

func (s *Session) newIno() uint64 { return s.inos.Add(1) }

// markDirty records that n's own entry (attributes, content or, for a
// directory, its names) changed, in a way the journal does not hold.
func (s *Session) markDirty(n *node) {
	s.dirtyMu.Lock()
	s.dirty[n] = struct{}{}
	s.metaDirty = true
	s.dirtyMu.Unlock()
}

// markWritten records that [off, end) of file n was written. Called with
// n.mu held.
func (s *Session) markWritten(n *node, off, end int64) {
	n.data.unjournaled = addSpan(n.data.unjournaled, off, end)
	s.dirtyMu.Lock()
	s.dirty[n] = struct{}{}
	s.dirtyMu.Unlock()
}

// markChanged records that n's entry changed, as a journal record says
// (or where the daemon did not see it: a staged file's last writer
// closed).
func (s *Session) markChanged(n *node) {
	s.dirtyMu.Lock()
	s.dirty[n] = struct{}{}
	s.dirtyMu.Unlock()
}

// durableAt records that the session head, at generation gen, durably
// holds root and every change made so far: the journal starts afresh.
// Called with freeze held exclusively.
func (s *Session) durableAt(gen uint64, root cas.Ref) error {
	s.gen, s.synced = gen, root
	s.lastFlush.Store(time.Now().UnixNano())
	s.dirtyMu.Lock()
	s.metaDirty = false
	s.dirtyMu.Unlock()
	if s.journal == nil {
		s.removeStaleBackings()
		return nil
	}
	return s.resetJournal(gen)
}

// flushSoon asks the engine's periodic flush goroutine to flush s now,
// if its journal is filling (journal.filling); it does not wait.
func (s *Session) flushSoon() {
	if s.soon == nil || s.journal == nil || !s.journal.filling() || s.soonAsked.Swap(true) {
		return
	}
	select {
	case s.soon <- s:
	default:
		s.soonAsked.Store(false) // the queue is full: the next look asks again
	}
}

// resetJournal empties s's journal, whose every record the durable head
// at generation gen holds, gives the backing files still live (liveFiles)
// a live record as the new incarnation's first records, written with its
// header (the reset dropped the records that named them), and removes the
// backing files no record names any more. Called with freeze held
// exclusively.
func (s *Session) resetJournal(gen uint64) error {
	var files []liveBackingFile
	if s.journaling() {
		files = s.liveFiles()
	}
	inc, err := s.journal.resetWith(gen, liveBlock(files))
	if err != nil {
		// The files have no live record: the next flush stores them.
		s.dirtyMu.Lock()
		s.metaDirty = true
		s.dirtyMu.Unlock()
		return err
	}
	s.treeMu.Lock()
	for i, f := range files {
		id := blockID(i)
		f.n.mu.Lock()
		f.n.jid, f.n.jinc = id, inc
		if f.n.data.backing == f.b {
			f.b.jid, f.b.jinc = id, inc
		}
		f.n.mu.Unlock()
	}
	s.treeMu.Unlock()
	s.removeStaleBackings()
	return nil
}

// nodeFromEntry makes a node for a stored entry. Called with treeMu held.
func (s *Session) nodeFromEntry(e *manifest.Entry) *node {
	if e.LinkID != 0 {
		if n, ok := s.links[e.LinkID]; ok {
			return n
		}
	}
	n := &node{
		ino:   s.newIno(),
		kind:  e.Kind,
		sess:  s,
		mode:  e.Mode,
		uid:   e.UID,
		gid:   e.GID,
		mtime: e.MtimeNs,
		ctime: e.CtimeNs,
		atime: e.Atime(),
		btime: e.BtimeNs,
	}
	if len(e.Xattrs) > 0 {
		n.xattrs = make(map[string][]byte, len(e.Xattrs))
		for _, x := range e.Xattrs {
			n.xattrs[x.Name] = x.Value
		}
	}
	switch e.Kind {
	case manifest.KindDir:
		n.tree = e.Tree
	case manifest.KindSymlink:
		n.target = e.Target
	case manifest.KindCharDev, manifest.KindBlockDev:
		n.rdev = e.Rdev
	case manifest.KindFile:
		n.data = &fileData{size: e.Size, base: manifest.Entry{Kind: manifest.KindFile, Size: e.Size, Chunks: e.Chunks, Index: e.Index, Depth: e.Depth}}
	}
	if e.LinkID != 0 && e.Kind != manifest.KindDir {
		n.linkID = e.LinkID
		n.nlink = e.Nlink
		s.links[e.LinkID] = n
	}
	return n
}

// load makes sure dir's children are in memory. Called with treeMu held.
func (s *Session) load(ctx context.Context, dir *node) error {
	if dir.children != nil {
		return nil
	}
	t, err := manifest.GetTree(ctx, s.store, dir.tree)
	if err != nil {
		return fmt.Errorf("load directory (inode %d, tree %s): %w", dir.ino, dir.tree.Short(), err)
	}
	if a := t.Self; a != nil && dir == s.root {
		dir.mu.Lock()
		dir.mode, dir.uid, dir.gid = a.Mode, a.UID, a.GID
		dir.mtime, dir.ctime, dir.atime, dir.btime = a.MtimeNs, a.CtimeNs, a.Atime(), a.BtimeNs
		dir.xattrs = nil
		if len(a.Xattrs) > 0 {
			dir.xattrs = make(map[string][]byte, len(a.Xattrs))
			for _, x := range a.Xattrs {
				dir.xattrs[x.Name] = x.Value
			}
		}
		dir.mu.Unlock()
	}
	dir.children = make(map[string]*node, len(t.Entries))
	for i := range t.Entries {
		e := &t.Entries[i]
		c := s.nodeFromEntry(e)
		s.attach(dir, e.Name, c, false)
	}
	return nil
}

// attach adds name → c in dir. Called with treeMu held.
func (s *Session) attach(dir *node, name string, c *node, fresh bool) {
	dir.children[name] = c
	if c.isDir() {
		c.parent = dir
		dir.subdirs++
		return
	}
	if c.parents == nil {
		c.parents = make(map[*node]int, 1)
	}
	c.parents[dir]++
	// A stored hard-linked file or symlink arrives with its total count;
	// every other
	// attach is one more name.
	if fresh || c.linkID == 0 {
		c.nlink++
	}
}

// detach removes name from dir. Called with treeMu held.
func (s *Session) detach(dir *node, name string) *node {
	c := dir.children[name]
	delete(dir.children, name)
	if c == nil {
		return nil
	}
	if c.isDir() {
		c.parent = nil
		dir.subdirs--
		return c
	}
	if c.parents[dir]--; c.parents[dir] <= 0 {
		delete(c.parents, dir)
	}
	if c.nlink > 0 {
		c.nlink--
	}
	return c
}

// lookup finds name in dir, loading dir if needed.
func (s *Session) lookup(ctx context.Context, dir *node, name string) (*node, error) {
	if len(name) > manifest.MaxNameLen {
		return nil, syscall.ENAMETOOLONG // as ext4 answers, not ENOENT
	}
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if !dir.isDir() {
		return nil, syscall.ENOTDIR
	}
	if err := s.load(ctx, dir); err != nil {
		return nil, err
	}
	c, ok := dir.children[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	return c, nil
}

// DirEntry is one name of a directory listing.
type DirEntry struct {
	Name string
	Ino  uint64
	Kind manifest.Kind
}

// list returns dir's entries sorted by name.
func (s *Session) list(ctx context.Context, dir *node) ([]DirEntry, error) {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if err := s.load(ctx, dir); err != nil {
		return nil, err
	}
	out := make([]DirEntry, 0, len(dir.children))
	for name, c := range dir.children {
		out = append(out, DirEntry{Name: name, Ino: c.ino, Kind: c.kind})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// subdirCount counts dir's subdirectories, for its link count.
func (s *Session) subdirCount(ctx context.Context, dir *node) (int, error) {
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if err := s.load(ctx, dir); err != nil {
		return 0, err
	}
	return dir.subdirs, nil
}

// newLinkID picks a hard-link identity; random so that it never collides
// with one stored in a part of the tree not loaded yet.
func newLinkID() uint64 {
	for {
		if id := rand.Uint64(); id != 0 {
			return id
		}
	}
}
