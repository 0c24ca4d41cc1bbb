package fusefs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fusefs/uring"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// Errors of the Engine API.
var (
	ErrBusy         = errors.New("fusefs: mountpoint busy")
	ErrInsideStore  = errors.New("fusefs: mountpoint overlaps the store directory")
	ErrNotMounted   = errors.New("fusefs: not mounted")
	ErrNotDirectory = errors.New("fusefs: subtree is not a directory")
	ErrNoSubtree    = errors.New("fusefs: no such subtree")
	ErrSessionInUse = errors.New("fusefs: session is mounted")
	// ErrMountOptions is a mount whose options this host or mount refuses
	// (allow_other for an ordinary user without user_allow_other, an
	// owner for a read-only mount).
	ErrMountOptions  = errors.New("fusefs: mount options refused")
	errEngineClosing = errors.New("fusefs: engine is closing")
)

// Options configure an Engine.
type Options struct {
	// StoreDir is the directory holding the store; mountpoints inside it
	// are refused, and statfs reports its filesystem.
	StoreDir string
	Logger   *slog.Logger
	// CacheChunks is how many plain chunks the read cache keeps (64 KiB
	// each); 0 means 256.
	CacheChunks int
	// FlushInterval is how often changes nobody fsynced are made durable
	// anyway, as ext4 commits every 5 s: harnesses that never fsync (Pi,
	// Claude Code's transcripts) lose at most that much to a crash. 0 means
	// 5 s; a negative value turns it off.
	FlushInterval time.Duration
	// NoStaging serves writers of new files through the daemon instead of
	// staging them (staged.go), as homefs did before staging: for
	// measuring it, or for a backing filesystem one would rather not use.
	NoStaging bool
	// URing says whether mounts are served through FUSE over io_uring
	// (package fusefs/uring), and whether the engine may turn the host's
	// switch on for it (URingMode); a mount that cannot use it is served
	// over /dev/fuse. HOMEFS_FUSE_URING (on or 1, auto, off or 0) in the
	// environment overrides it, so that the test suite can run over either
	// transport.
	URing URingMode
	// ShutdownGrace is how long Close serves the open files of a busy
	// mount it detached before it ends the mount's connection (shutdown.go);
	// 0 means 5 s.
	ShutdownGrace time.Duration
	// Observer, when set, is told of every kernel request and flush
	// (observe.go); nil costs a request one comparison.
	Observer Observer
	// IdleAfter is how long a session's empty journal and its pool of
	// staging files stay open unused before the periodic flush closes
	// them (Session.parkIdle), so that an idle mount holds no descriptor
	// but its connection's; 0 means 10 s.
	IdleAfter time.Duration
	// SalvageJournals loads a session whose journal is damaged in its
	// middle by replaying the records before the damage only (a copy of
	// the journal is kept); without it such a session is refused
	// (ErrJournalDamaged).
	SalvageJournals bool
}

// Engine serves sessions of one store: it mounts them and implements
// capture, fork and restore. It is safe for concurrent use.
type Engine struct {
	store    cas.Store
	cat      *catalog.Catalog
	storeDir string
	noStage  bool
	// salvageJournals: Options.SalvageJournals
	salvageJournals bool
	uring           URingMode
	grace           time.Duration // Options.ShutdownGrace
	idle            time.Duration // Options.IdleAfter
	obs             Observer      // Options.Observer; nil when nothing observes
	log             *slog.Logger
	cache           *chunkCache
	parked          *parkedCopies // nil with no storeDir
	inos            atomic.Uint64
	buffers         buffers

	mu       sync.Mutex
	sessions map[string]*Session // live sessions by name; GUARDED_BY(mu)
	mounts   map[string]*Mount   // by mountpoint; GUARDED_BY(mu)
	closing  bool                // GUARDED_BY(mu)

	// uringHeld is set while the engine holds the host's switch
	// (URingOn); Close lets go of it. GUARDED_BY(mu)
	uringHeld bool

	stopFlusher chan struct{}  // closed by Close
	flusher     sync.WaitGroup // the periodic flush goroutine
	// afterCommit, set by tests before the engine is used, runs when a
	// flush has moved a session's head and not yet reset its journal.
	afterCommit func()
	// soon carries the sessions whose journal filled past half
	// (Session.flushSoon) to the periodic flush goroutine, which flushes
	// them at once.
	soon chan *Session
}

// New returns an Engine over store and its catalog.
func New(store cas.Store, cat *catalog.Catalog, opts Options) *Engine {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	cacheChunks := opts.CacheChunks
	if cacheChunks <= 0 {
		cacheChunks = 256
	}
	// Every put goes through a Recorder so that gc can run beside writers
	// (see gc.go).
	store = Record(store)
	e := &Engine{
		store:           store,
		cat:             cat,
		storeDir:        opts.StoreDir,
		noStage:         opts.NoStaging,
		salvageJournals: opts.SalvageJournals,
		uring:           opts.URing,
		grace:           opts.ShutdownGrace,
		obs:             opts.Observer,
		log:             log,
		cache:           newChunkCache(store, cacheChunks),
		parked:          openParked(opts.StoreDir, log),
		sessions:        make(map[string]*Session),
		mounts:          make(map[string]*Mount),
	}
	e.buffers.budget = bufferBudget()
	if e.grace <= 0 {
		e.grace = defaultShutdownGrace
	}
	e.idle = opts.IdleAfter
	if e.idle <= 0 {
		e.idle = defaultIdleAfter
	}
	switch v := os.Getenv("HOMEFS_FUSE_URING"); v {
	case "":
	case "1":
		e.uring = URingOn
	case "0":
		e.uring = URingOff
	default:
		if m, err := ParseURingMode(v); err == nil {
			e.uring = m
		} else {
			log.Warn("HOMEFS_FUSE_URING ignored", "err", err)
		}
	}
	e.holdURing()
	e.inos.Store(1) // FUSE reserves 1 for the root of each mount
	interval := opts.FlushInterval
	if interval == 0 {
		interval = 5 * time.Second
	}
	e.stopFlusher = make(chan struct{})
	e.soon = make(chan *Session, 16)
	if interval > 0 {
		e.flusher.Add(1)
		go e.flushEvery(interval)
	}
	return e
}

// flushEvery makes every live session's changes durable every interval,
// until Close.
func (e *Engine) flushEvery(interval time.Duration) {
	defer e.flusher.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-e.stopFlusher:
			return
		case s := <-e.soon:
			e.flushFilling(s)
			continue
		case <-t.C:
		}
		sessions := e.liveSessions()
		e.parked.dropIfFull()
		// Parking first: a pass of flushes over many sessions takes long.
		for _, s := range sessions {
			s.parkIdle(time.Now(), e.idle)
		}
		for _, s := range sessions {
			s.trimBackingPool()
			s.dropKeptIfFull()
			s.dirtyMu.Lock()
			dirty := len(s.dirty) > 0
			s.dirtyMu.Unlock()
			// Every check runs: stagedIdle keeps its watch current.
			idle := s.stagedIdle(time.Now())
			if !dirty && !s.appendersDue() && !idle {
				continue
			}
			if err := e.syncPartial(context.Background(), s); err != nil {
				e.log.Error("periodic flush failed; changes stay in memory", "session", s.name, "err", err)
			}
		}
	}
}

// flushFilling flushes s, whose journal filled past half, before it is
// full: a full journal takes no record until the next flush, and changes
// made meanwhile would survive a crash of the daemon only once flushed.
func (e *Engine) flushFilling(s *Session) {
	s.soonAsked.Store(false)
	e.mu.Lock()
	live := e.sessions[s.name] == s
	e.mu.Unlock()
	if !live {
		return
	}
	if err := e.syncPartial(context.Background(), s); err != nil {
		e.log.Error("flush of a filling journal failed; changes stay in memory", "session", s.name, "err", err)
	}
}

// Catalog returns the session and snapshot catalog.
func (e *Engine) Catalog() *catalog.Catalog { return e.cat }

// live returns the live session name, loading it from its head.
func (e *Engine) live(ctx context.Context, name string) (*Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return nil, errEngineClosing
	}
	if s, ok := e.sessions[name]; ok {
		return s, nil
	}
	h, err := e.cat.Head(ctx, name)
	if err != nil {
		return nil, err
	}
	s := newSession(name, e.store, e.cache, &e.inos, &e.buffers, h.Root, false, e.log)
	s.gen = h.Gen
	s.flushNow = func(ctx context.Context) error { return e.syncPartial(ctx, s) }
	s.soon = e.soon
	s.lastFlush.Store(h.UpdatedNs)
	if e.storeDir != "" {
		s.backingDir = backingDir(e.storeDir, name)
		s.parked = e.parked
		s.noStage = e.noStage
		if err := e.openJournal(ctx, s); err != nil {
			return nil, err
		}
	}
	e.sessions[name] = s
	return s, nil
}

// openJournal gives s its journal, first replaying what a crash left in
// it (writes fsynced through the journal after the head was last moved)
// and making that durable in the head. Called with e.mu held, before s is
// shown anywhere.
func (e *Engine) openJournal(ctx context.Context, s *Session) error {
	j, err := openJournal(e.storeDir, s.name)
	if err != nil {
		return fmt.Errorf("session %s: %w", s.name, err)
	}
	// A writer that outlived the daemon that passed it through to a
	// backing file gets EPERM from now on, rather than writing where no
	// one reads: what it wrote before is replayed.
	sealed := s.sealBackingDir()
	// The replay's changes are not journaled: the journal gets them once
	// they are made durable in the head.
	replayed, err := s.replayJournal(ctx, j.path, e.salvageJournals)
	if err != nil {
		j.close()
		return err
	}
	s.journal = j
	if replayed {
		e.log.Warn("replayed the journal of writes fsynced before a crash", "session", s.name,
			"records", s.replayed.records, "applied", s.replayed.applied, "staged_bytes_read", s.replayed.stagedBytes)
		// durableAt resets the journal.
		if err := e.sync(ctx, s); err != nil {
			return err
		}
	} else if err := j.reset(s.gen); err != nil {
		return err
	}
	// No record names a staging file any more.
	s.clearBackingDir(sealed)
	// The first record reopens it (journal.unpark).
	j.park(time.Now(), 0)
	return nil
}

// MountOptions configure one mount.
type MountOptions struct {
	ReadOnly bool
	// AllowOther lets other users use the mount; the kernel then enforces
	// mode bits and ownership (default_permissions), as on ext4.
	AllowOther bool
	// Owner, when set, becomes the owner of the mount's root directory
	// (a live session's, as chown would make it) before the kernel sees it.
	Owner *Owner
	// Dev lets device nodes on the mount open their devices; without it
	// the mount is nodev, as fusermount3 makes every user's mount. Only a
	// daemon running as root may mount so.
	Dev bool
	// NoAtime leaves every atime as it is (mount -o noatime); otherwise
	// reads set them as relatime does (atime.go). A read-only mount sets
	// none either.
	NoAtime bool
	Debug   bool
}

// Mount is one mountpoint showing a session (or a snapshot) or a subtree of
// it.
type Mount struct {
	engine  *Engine
	sess    *Session
	subtree string
	dir     string
	root    *fnode
	server  *fuse.Server
	// uring serves the mount's requests when it uses FUSE over io_uring;
	// such a mount was made by homefs, not go-fuse, and is unmounted so.
	uring *uring.Server
	log   *slog.Logger
	// shortCache is set while another mount shows part of what this one
	// shows.
	shortCache atomic.Bool
	rootIno    uint64 // the mountpoint's inode number, for its whole life
	// releasing counts RELEASE requests being served (rawGate).
	releasing atomic.Int32
	// streams keeps the listings of recently read directories.
	streams dirStreams
	gate    *rawGate
	// conn names the mount's connection in fusectl (/sys/fs/fuse/
	// connections), read from the mount table once mounted; "" if unknown.
	conn string
	// noAtime: reads through the mount set no atime (MountOptions.NoAtime,
	// or a read-only mount).
	noAtime bool
}

// Dir is the mountpoint.
func (m *Mount) Dir() string { return m.dir }

// Transport says how the kernel's requests reach the mount: "io_uring" or
// "/dev/fuse".
func (m *Mount) Transport() string {
	if m.uring != nil && m.uring.Active() {
		return "io_uring"
	}
	return "/dev/fuse"
}

// Session is the name of the session shown (for a snapshot mount, the
// snapshot's id).
func (m *Mount) Session() string { return m.sess.name }

// Subtree is the path inside the session shown at the mountpoint.
func (m *Mount) Subtree() string { return m.subtree }

// Mount shows session (its subtree, "" for all of it) at dir. A missing
// subtree is created, as mkdir -p would, unless opts.ReadOnly: then, as
// for MountSnapshot, the error wraps ErrNoSubtree.
func (e *Engine) Mount(ctx context.Context, session, subtree, dir string, opts MountOptions) (*Mount, error) {
	if opts.ReadOnly {
		// A read-only view of a live session is its state as of now.
		if err := e.Sync(ctx, session); err != nil {
			return nil, err
		}
		h, err := e.cat.Head(ctx, session)
		if err != nil {
			return nil, err
		}
		s := newSession(session, e.store, e.cache, &e.inos, &e.buffers, h.Root, true, e.log)
		return e.mount(ctx, s, subtree, dir, opts)
	}
	s, err := e.live(ctx, session)
	if err != nil {
		return nil, err
	}
	return e.mount(ctx, s, subtree, dir, opts)
}

// MountSnapshot shows a snapshot, read-only, at dir.
func (e *Engine) MountSnapshot(ctx context.Context, spec, subtree, dir string, opts MountOptions) (*Mount, error) {
	snap, id, err := e.cat.Resolve(ctx, spec)
	if err != nil {
		return nil, err
	}
	s := newSession(id, e.store, e.cache, &e.inos, &e.buffers, snap.Root, true, e.log)
	opts.ReadOnly = true
	return e.mount(ctx, s, subtree, dir, opts)
}

func cleanSubtree(subtree string) (string, error) {
	subtree = strings.Trim(subtree, "/")
	if subtree == "" {
		return "", nil
	}
	if err := manifest.ValidatePath(subtree); err != nil {
		return "", err
	}
	return subtree, nil
}

// walkFrom walks path from root ("" for root itself), loading the
// directories on the way; a name not found is an error wrapping missing.
// Called with treeMu held.
func (s *Session) walkFrom(ctx context.Context, root *node, path string, missing error) (*node, error) {
	n := root
	if path == "" {
		return n, nil
	}
	for _, part := range strings.Split(path, "/") {
		if !n.isDir() {
			return nil, fmt.Errorf("%w: %s", ErrNotDirectory, path)
		}
		if err := s.load(ctx, n); err != nil {
			return nil, err
		}
		c, ok := n.children[part]
		if !ok {
			return nil, fmt.Errorf("%w: %s", missing, path)
		}
		n = c
	}
	return n, nil
}

// resolveDir walks path from the session root. Called with treeMu held.
func (s *Session) resolveDir(ctx context.Context, root *node, path string) (*node, error) {
	// Loading the session's root also gives it its own attributes, before
	// any request can see them.
	if err := s.load(ctx, root); err != nil {
		return nil, err
	}
	n, err := s.walkFrom(ctx, root, path, ErrNoSubtree)
	if err != nil {
		return nil, err
	}
	if !n.isDir() {
		return nil, fmt.Errorf("%w: %s", ErrNotDirectory, path)
	}
	return n, nil
}

// makeSubtree creates the directories of path that are missing, as
// mkdir -p does: mode 0755, owned like the session root. It returns the
// last one.
func (e *Engine) makeSubtree(ctx context.Context, s *Session, path string) (*node, error) {
	s.treeMu.Lock()
	if err := s.load(ctx, s.root); err != nil {
		s.treeMu.Unlock()
		return nil, err
	}
	s.root.mu.Lock()
	who := Owner{UID: s.root.uid, GID: s.root.gid}
	s.root.mu.Unlock()
	s.treeMu.Unlock()
	parts := strings.Split(path, "/")
	n := s.root
	for i := 0; i < len(parts); {
		s.treeMu.Lock()
		err := s.load(ctx, n)
		c, ok := n.children[parts[i]]
		s.treeMu.Unlock()
		if err != nil {
			return nil, err
		}
		if !ok {
			c, err = s.Mkdir(ctx, n, parts[i], 0o755, who)
			if errors.Is(err, syscall.EEXIST) {
				continue // made meanwhile: look again
			}
			if err != nil {
				return nil, fmt.Errorf("create subtree %s: %w", strings.Join(parts[:i+1], "/"), err)
			}
			// Other mounts of the session may hold the name as absent.
			e.invalidate(s, parts[:i+1])
		}
		if !c.isDir() {
			return nil, fmt.Errorf("%w: %s", ErrNotDirectory, strings.Join(parts[:i+1], "/"))
		}
		n = c
		i++
	}
	return n, nil
}

// checkMountpoint refuses a mountpoint that overlaps the store: the daemon
// must never read its own store through a mount.
func (e *Engine) checkMountpoint(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("mountpoint %s: %w", dir, err)
	}
	st, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("mountpoint %s: %w", dir, syscall.ENOTDIR)
	}
	if e.storeDir != "" {
		store, err := filepath.EvalSymlinks(e.storeDir)
		if err != nil {
			return "", fmt.Errorf("store directory %s: %w", e.storeDir, err)
		}
		if within(real, store) || within(store, real) {
			return "", fmt.Errorf("%w: %s and %s", ErrInsideStore, real, store)
		}
	}
	return real, nil
}

// How long the kernel may trust entries and attributes: long while one
// mount alone shows a part of a session, short while mounts overlap (each
// then misses the other's changes for at most that long). A mount alone
// hears of every change (through itself, or restore's and graft's
// notifications), so the long timeout bounds only what it could miss, a
// hard-linked file's attributes changed through another mount that does
// not overlap it; with a minute, every tree walked again after a minute
// (a grep, git status) made a LOOKUP of each name it passed.
const (
	longCacheTimeout  = time.Hour
	shortCacheTimeout = time.Second
)

func (m *Mount) cacheTimeout() time.Duration {
	if m.shortCache.Load() {
		return shortCacheTimeout
	}
	return longCacheTimeout
}

// startShortCache switches m to short timeouts because another mount now
// shows part of what it shows, and makes the kernel forget what m told it
// under the long ones.
func (m *Mount) startShortCache() {
	if m.shortCache.Swap(true) {
		return
	}
	var forget func(in *fs.Inode)
	forget = func(in *fs.Inode) {
		in.NotifyContent(0, 0)
		for name, c := range in.Children() {
			forget(c)
			in.NotifyEntry(name)
		}
	}
	forget(&m.root.Inode)
}

// overlaps reports whether one of two session subtrees contains the other.
func overlaps(a, b string) bool {
	return a == "" || b == "" || a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}

// within reports whether p is base or below it.
func within(p, base string) bool {
	rel, err := filepath.Rel(base, p)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func (e *Engine) mount(ctx context.Context, s *Session, subtree, dir string, opts MountOptions) (*Mount, error) {
	subtree, err := cleanSubtree(subtree)
	if err != nil {
		return nil, err
	}
	real, err := e.checkMountpoint(dir)
	if err != nil {
		return nil, err
	}
	if err := checkMountOptions(opts); err != nil {
		return nil, err
	}
	rootNode, err := e.mountRoot(ctx, s, subtree, real, opts)
	if err != nil {
		return nil, err
	}
	m := &Mount{engine: e, sess: s, subtree: subtree, dir: real, log: e.log, noAtime: opts.NoAtime || opts.ReadOnly}
	m.root = m.wrap(rootNode)
	m.rootIno = rootNode.ino
	if err := e.addMount(m); err != nil {
		return nil, err
	}
	server, err := e.mountFS(real, m, e.fsOptions(s, opts, rootNode.ino))
	if err != nil {
		e.mu.Lock()
		delete(e.mounts, real)
		e.mu.Unlock()
		if errors.Is(err, syscall.EBUSY) {
			return nil, fmt.Errorf("%w: %s: %v", ErrBusy, real, err)
		}
		return nil, fmt.Errorf("mount %s: %w", real, err)
	}
	m.server = server
	if m.conn, err = connOf(real); err != nil {
		// Close can then only wait for a busy mount's users to leave.
		m.log.Warn("connection of the mount unknown", "mount", real, "err", err)
	} else if os.Geteuid() == 0 {
		if err := setReadAhead(m.conn); err != nil {
			m.log.Warn("mount keeps the kernel's read-ahead window", "mount", real, "err", err)
		}
	}
	return m, nil
}

// checkMountOptions refuses the options the daemon's privileges do not
// allow.
func checkMountOptions(opts MountOptions) error {
	if err := checkUnprivileged(opts.AllowOther); err != nil {
		return err
	}
	if opts.Dev && os.Geteuid() != 0 {
		return fmt.Errorf("%w: only a daemon running as root may mount with device nodes enabled (dev)", ErrMountOptions)
	}
	return nil
}

// mountRoot returns the directory subtree of s that a mount at real with
// opts shows, made if a writable session has none, with the owner the
// options give it.
func (e *Engine) mountRoot(ctx context.Context, s *Session, subtree, real string, opts MountOptions) (*node, error) {
	s.treeMu.Lock()
	rootNode, err := s.resolveDir(ctx, s.root, subtree)
	s.treeMu.Unlock()
	if errors.Is(err, ErrNoSubtree) {
		if s.readOnly {
			return nil, fmt.Errorf("%w (a read-only or snapshot mount does not create it; a writable mount of the session does)", err)
		}
		rootNode, err = e.makeSubtree(ctx, s, subtree)
	}
	if err != nil {
		return nil, err
	}
	if o := opts.Owner; o != nil {
		if opts.ReadOnly {
			return nil, fmt.Errorf("%w: a read-only mount cannot change its root's owner", ErrMountOptions)
		}
		if err := s.Setattr(ctx, rootNode, SetAttr{UID: &o.UID, GID: &o.GID}); err != nil {
			return nil, fmt.Errorf("owner of %s: %w", real, err)
		}
	}
	return rootNode, nil
}

// addMount records m in the engine unless its mountpoint has a mount, and
// switches m and the mounts showing part of what it shows to short cache
// timeouts.
func (e *Engine) addMount(m *Mount) error {
	e.mu.Lock()
	if _, busy := e.mounts[m.dir]; busy {
		e.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrBusy, m.dir)
	}
	var overlapping []*Mount
	for _, other := range e.mounts {
		if other.sess == m.sess && overlaps(other.subtree, m.subtree) {
			overlapping = append(overlapping, other)
		}
	}
	if len(overlapping) > 0 {
		m.shortCache.Store(true)
	}
	e.mounts[m.dir] = m
	e.mu.Unlock()
	for _, other := range overlapping {
		other.startShortCache()
	}
	return nil
}

// fsOptions are go-fuse's options for a mount of s with opts, whose root
// is inode rootIno.
func (e *Engine) fsOptions(s *Session, opts MountOptions, rootIno uint64) *fs.Options {
	// While a mount is the only one showing its part of the session, every
	// change to it goes through it, or is pushed to the kernel by restore
	// and graft; so the kernel may cache entries, attributes and absent
	// names for long, which spares a round trip per stat. Overlapping
	// mounts of one session cache for a second only (see cacheTimeout).
	timeout := longCacheTimeout
	mopts := []string{"default_permissions", "nosuid", "nodev"}
	if opts.Dev {
		mopts[2] = "dev"
	}
	if opts.ReadOnly {
		mopts = append(mopts, "ro")
	}
	// As root the daemon mounts itself; unmount errors (EBUSY) then come
	// back as they are, with no fallback to a fusermount binary the host
	// may not have. An ordinary user mounts through fusermount3.
	direct := os.Geteuid() == 0
	return &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount:       direct,
			DirectMountStrict: direct,
			AllowOther:        opts.AllowOther,
			FsName:            "homefs:" + s.name,
			Name:              "homefs",
			MaxWrite:          1 << 20,
			// The daemon drops setuid, setgid and capabilities on write,
			// truncate and chown itself (killPriv); without this the kernel
			// asks for security.capability before every write, a second
			// round trip that doubles the cost of a small append.
			//
			// No-opendir mode spares a round trip per directory opened
			// (dirstream.go).
			//
			// POSIX ACLs, as ext4's default acl option has them: the
			// kernel enforces them and leaves the umask and the setgid
			// drop to the daemon (acl.go).
			ExtraCapabilities: fuse.CAP_HANDLE_KILLPRIV_V2 | fuse.CAP_NO_OPENDIR_SUPPORT | fuse.CAP_DONT_MASK | fuse.CAP_SETXATTR_EXT | fuse.CAP_DIRECT_IO_ALLOW_MMAP,
			EnableAcl:         true,
			MaxReadAhead:      readAheadBytes,
			Options:           mopts,
			Debug:             opts.Debug,
			// go-fuse recovers a panic in a handler and answers EIO; its
			// message (and the debug trace) goes to the engine's log.
			Logger: slog.NewLogLogger(e.log.Handler(), slog.LevelError),
		},
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		// Modes are exact: without this, go-fuse shows mode 0 as 0644.
		NullPermissions: true,
		RootStableAttr:  &fs.StableAttr{Ino: rootIno},
	}
}

// Unmount detaches the mount; the session's changes stay in memory until
// the next flush (Sync, Capture or Close).
func (m *Mount) Unmount() error {
	unmount := m.server.Unmount
	if m.uring != nil {
		unmount = m.uring.Unmount
	}
	err := unmount()
	// The kernel releases a file closed just before asynchronously: give a
	// busy mount up to a second more before calling it busy.
	for wait := 100 * time.Millisecond; errors.Is(err, syscall.EBUSY) && wait <= 400*time.Millisecond; wait *= 2 {
		time.Sleep(wait)
		err = unmount()
	}
	if errors.Is(err, syscall.EINVAL) {
		// The dir is no longer a mount point: someone took the mount out
		// of the mount table (umount -l, or another daemon's start
		// detaching a mount whose connection was aborted). Its servers
		// end with the connection.
		m.forget()
		return fmt.Errorf("unmount %s: %w", m.dir, ErrNotMounted)
	}
	if err != nil {
		return fmt.Errorf("unmount %s: %w", m.dir, err)
	}
	m.server.Wait()
	if m.uring != nil {
		m.uring.Wait()
	}
	m.forget()
	return nil
}

// forget drops an unmounted mount from the engine.
func (m *Mount) forget() {
	e := m.engine
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.mounts, m.dir)
	// Mounts left without an overlapping one go back to long timeouts: what
	// the kernel cached under short ones expires within a second.
	for _, a := range e.mounts {
		alone := true
		for _, b := range e.mounts {
			if a != b && a.sess == b.sess && overlaps(a.subtree, b.subtree) {
				alone = false
			}
		}
		if alone {
			a.shortCache.Store(false)
		}
	}
}

// Unmount detaches the mount at dir.
func (e *Engine) Unmount(dir string) error {
	real, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if r, err := filepath.EvalSymlinks(real); err == nil {
		real = r
	}
	e.mu.Lock()
	m, ok := e.mounts[real]
	e.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotMounted, dir)
	}
	return m.Unmount()
}

// Mounts lists the current mounts.
func (e *Engine) Mounts() []*Mount {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]*Mount, 0, len(e.mounts))
	for _, m := range e.mounts {
		out = append(out, m)
	}
	return out
}

// sync makes every change of s durable: after it returns, a kill -9 of the
// daemon loses nothing written before it started.
func (e *Engine) sync(ctx context.Context, s *Session) error {
	s.preflush(ctx, true)
	s.freeze.Lock()
	defer s.freeze.Unlock()
	return e.syncLocked(ctx, s, true)
}

// syncPartial makes every change of s durable but what writers of staged
// files wrote since their last fsync (staged.go): the flush of an fsync,
// and the periodic one.
func (e *Engine) syncPartial(ctx context.Context, s *Session) error {
	s.preflush(ctx, false)
	s.freeze.Lock()
	defer s.freeze.Unlock()
	return e.syncLocked(ctx, s, false)
}

// syncLocked is sync (all set) or syncPartial with s.freeze held
// exclusively.
func (e *Engine) syncLocked(ctx context.Context, s *Session, all bool) (err error) {
	if e.obs != nil {
		start, synced := time.Now(), s.synced
		defer func() {
			if err != nil || s.synced != synced {
				e.obs.Flush(time.Since(start), err)
			}
		}()
	}
	root, err := s.flushLocked(ctx, false, all)
	if err != nil {
		return err
	}
	if root == s.synced {
		// The durable head already holds every change: an fsync of a
		// directory after its file, or of a file nobody wrote, costs nothing.
		// The flush set metaDirty for its stores, which the head holds.
		s.dirtyMu.Lock()
		wasDirty := s.metaDirty
		s.metaDirty = false
		s.dirtyMu.Unlock()
		// Staging files dropped by this flush go now: the journal can
		// start afresh, since every record in it is in the head (such as
		// a backing file's drop, which changes nothing the head holds).
		// After a change the journal did not take, files opened since
		// have no live record: the reset gives them one.
		if s.journal != nil && (wasDirty || s.backed.hasStale() || s.journal.holds()) {
			return s.resetJournal(s.gen)
		}
		return nil
	}
	// Should the daemon die between this commit and the journal's reset,
	// the journal is of the old head: what it needs for the new one goes
	// into it first.
	s.journalNext(s.gen+1, false)
	h, err := e.cat.SetRoot(ctx, s.name, s.gen, root, true)
	if err != nil {
		return fmt.Errorf("record flushed root of %s: %w", s.name, err)
	}
	if e.afterCommit != nil {
		e.afterCommit() // tests: a crash here
	}
	return s.durableAt(h.Gen, root)
}

// Sync flushes the named session, if it is live, durably.
func (e *Engine) Sync(ctx context.Context, session string) error {
	e.mu.Lock()
	s, ok := e.sessions[session]
	e.mu.Unlock()
	if !ok {
		if _, err := e.cat.Head(ctx, session); err != nil {
			return err
		}
		return nil
	}
	return e.sync(ctx, s)
}

// Capture freezes the session's current state as an immutable snapshot,
// atomically across every mount of it. Writers wait only while the
// changes since the last flush are stored.
func (e *Engine) Capture(ctx context.Context, session, msg string, handles map[string]manifest.Handle) (*manifest.Snapshot, string, error) {
	e.mu.Lock()
	s, ok := e.sessions[session]
	e.mu.Unlock()
	if !ok {
		h, err := e.cat.Head(ctx, session)
		if err != nil {
			return nil, "", err
		}
		return e.cat.Capture(ctx, session, h.Root, msg, handles)
	}
	s.preflush(ctx, true)
	s.freeze.Lock()
	defer s.freeze.Unlock()
	root, err := s.flushLocked(ctx, false, true)
	if err != nil {
		return nil, "", err
	}
	// The head the capture wrote has the generation the session's next
	// flush expects. Between it and the journal's reset, the journal is of
	// the old head (journalNext).
	s.journalNext(s.gen+1, false)
	snap, id, h, err := e.cat.CaptureHead(ctx, session, root, msg, handles)
	if err != nil {
		return nil, "", err
	}
	if err := s.durableAt(h.Gen, root); err != nil {
		return nil, "", err
	}
	return snap, id, nil
}

// Fork makes target a new session whose base is source: a snapshot spec
// (ID, SESSION@ID) or a session, which is captured first. It is O(1): the
// new session shares every node and chunk with the source.
func (e *Engine) Fork(ctx context.Context, source, target string) (*catalog.Head, error) {
	if err := manifest.ValidateSessionName(target); err != nil {
		return nil, fmt.Errorf("fork %s → %s: %w", source, target, err)
	}
	if src, _, _ := strings.Cut(source, "@"); src == target {
		return nil, fmt.Errorf("fork %s → %s: %w", source, target, catalog.ErrSameSession)
	}
	if _, err := e.cat.Head(ctx, target); err == nil {
		return nil, fmt.Errorf("fork %s → %s: %w", source, target, catalog.ErrExists)
	}
	id := ""
	if !strings.Contains(source, "@") {
		if _, err := e.cat.Head(ctx, source); err == nil {
			if _, sid, err := e.Capture(ctx, source, "fork to "+target, nil); err != nil {
				return nil, err
			} else {
				id = sid
			}
		}
	}
	if id == "" {
		_, sid, err := e.cat.Resolve(ctx, source)
		if err != nil {
			return nil, err
		}
		id = sid
	}
	return e.cat.Fork(ctx, id, target)
}

// Restore switches session to the snapshot spec atomically, after checking
// that every node and chunk it needs is present and that every mounted
// subtree exists in it. Open files keep the content they had, as if they
// had been unlinked; new lookups see the restored tree.
func (e *Engine) Restore(ctx context.Context, session, spec string) error {
	snap, id, err := e.cat.Resolve(ctx, spec)
	if err != nil {
		return err
	}
	if err := catalog.VerifyComplete(ctx, e.store, snap.Root); err != nil {
		return fmt.Errorf("restore %s to %s: %w", session, id, err)
	}
	e.mu.Lock()
	s, live := e.sessions[session]
	var mounts []*Mount
	for _, m := range e.mounts {
		if m.sess == s {
			mounts = append(mounts, m)
		}
	}
	e.mu.Unlock()
	if !live {
		_, err := e.cat.Restore(ctx, session, id)
		return err
	}

	fresh := newSession(session, e.store, e.cache, &e.inos, &e.buffers, snap.Root, false, e.log)
	roots := make([]*node, len(mounts))
	for i, m := range mounts {
		fresh.treeMu.Lock()
		roots[i], err = fresh.resolveDir(ctx, fresh.root, m.subtree)
		if err == nil {
			// Load the names now: the kernel must hear of each below.
			err = fresh.load(ctx, roots[i])
		}
		fresh.treeMu.Unlock()
		if err != nil {
			return fmt.Errorf("restore %s to %s: mounted subtree %q: %w", session, id, m.subtree, err)
		}
	}

	s.freeze.Lock()
	// The restored tree is another: no live file of this one goes into
	// it, and no block an earlier flush wrote may be taken for its head.
	s.journalNext(s.gen+1, true)
	h, err := e.cat.Restore(ctx, session, id)
	if err != nil {
		s.freeze.Unlock()
		return err
	}
	s.treeMu.Lock()
	s.root = fresh.root
	s.links = fresh.links
	for _, n := range collect(fresh.root) {
		n.sess = s
	}
	s.treeMu.Unlock()
	// The old tree's read copies (staged.go) no name leads to any more.
	s.forgetKept()
	s.dirtyMu.Lock()
	s.dirty = make(map[*node]struct{})
	clear(s.atimes)
	s.dirtyMu.Unlock()
	s.flushed = snap.Root
	if err := s.durableAt(h.Gen, snap.Root); err != nil {
		e.log.Error("reset journal after restore", "session", session, "err", err)
	}
	for i, m := range mounts {
		roots[i].sess = s
		m.root.n.Store(roots[i])
	}
	s.freeze.Unlock()

	// Tell the kernel outside the locks: it may call back into the mount.
	for i, m := range mounts {
		// Old names (cached positive) and new ones (maybe cached absent).
		names := m.root.Children()
		s.treeMu.Lock() // the fresh nodes are s's now
		for name := range roots[i].children {
			names[name] = nil
		}
		s.treeMu.Unlock()
		for name := range names {
			m.root.NotifyEntry(name)
		}
		m.root.NotifyContent(0, 0)
	}
	return nil
}

// collect lists the loaded nodes below n. Called with treeMu held.
func collect(n *node) []*node {
	out := []*node{n}
	for _, c := range n.children {
		if c.isDir() {
			out = append(out, collect(c)...)
		} else {
			out = append(out, c)
		}
	}
	return out
}

// Close unmounts everything and flushes every live session durably. A
// busy mount is detached at once and its open files served for the grace
// period (Options.ShutdownGrace, or until ctx ends); then its connection
// is ended and its passthrough files sealed, and only then is every
// session flushed: every write acknowledged before is in the flush, and
// every later one fails (shutdown.go). The periodic flush runs on through
// the grace period.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	first := !e.closing
	e.closing = true
	mounts := make([]*Mount, 0, len(e.mounts))
	for _, m := range e.mounts {
		mounts = append(mounts, m)
	}
	sessions := e.liveSessionsLocked()
	e.mu.Unlock()
	var errs []error
	busy, err := e.endMounts(ctx, mounts)
	if err != nil {
		errs = append(errs, err)
	}
	if first {
		close(e.stopFlusher)
	}
	e.flusher.Wait()
	for _, s := range sessions {
		if busy[s] {
			s.sealBackings()
		}
	}
	for _, s := range sessions {
		err := e.sync(ctx, s)
		if err != nil {
			errs = append(errs, fmt.Errorf("flush %s: %w", s.name, err))
		}
		s.closeBackings(err == nil, false)
		if s.journal != nil {
			if err := s.journal.close(); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// Every mount is gone: the host's switch goes back as it was.
	e.releaseURing()
	return errors.Join(errs...)
}

// mountFS mounts m's root at dir, as fs.Mount does, with the file system
// wrapped in m's rawGate.
func (e *Engine) mountFS(dir string, m *Mount, opts *fs.Options) (*fuse.Server, error) {
	mountFlags(&opts.MountOptions, m.noAtime)
	raw := &rawGate{RawFileSystem: fs.NewNodeFS(m.root, opts), m: m, obs: e.obs}
	m.gate = raw
	if e.uringUsable(dir) {
		server, us, err := uring.Mount(dir, raw, &opts.MountOptions, m.log)
		if err == nil {
			m.uring = us
			return server, nil
		}
		m.log.Warn("serving over /dev/fuse", "mount", dir, "err", err)
	}
	server, err := fuse.NewServer(raw, dir, &opts.MountOptions)
	if err != nil {
		return nil, err
	}
	if err := closeFUSEOnExec(); err != nil {
		m.log.Warn("mark /dev/fuse close-on-exec", "mount", dir, "err", err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		return nil, err
	}
	return server, nil
}

// liveSessions returns the engine's live sessions as of now.
func (e *Engine) liveSessions() []*Session {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.liveSessionsLocked()
}

// liveSessionsLocked is liveSessions, called with e.mu held.
func (e *Engine) liveSessionsLocked() []*Session {
	sessions := make([]*Session, 0, len(e.sessions))
	for _, s := range e.sessions {
		sessions = append(sessions, s)
	}
	return sessions
}
