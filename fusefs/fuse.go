package fusefs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// fnode is a node as one mount shows it. go-fuse keeps one inode tree per
// mount, so each mount wraps the shared session nodes in its own fnodes;
// the kernel's node identity is the session node's ino.
type fnode struct {
	fs.Inode
	m *Mount
	// n is fixed for every fnode but a mount's root, which a restore
	// points at the restored tree.
	n atomic.Pointer[node]

	// opens counts this mount's open handles of the node, ptOpens those
	// of them that are passthrough (passthrough.go). GUARDED_BY(openMu)
	openMu  sync.Mutex
	opens   int
	ptOpens int
	// cacheGen is the content generation (node.contentGen) that the pages
	// the kernel caches for this mount were read at; 0 for none known.
	// GUARDED_BY(openMu)
	cacheGen uint64
}

func (m *Mount) wrap(n *node) *fnode {
	f := &fnode{m: m}
	f.n.Store(n)
	return f
}

var (
	_ fs.NodeLookuper       = (*fnode)(nil)
	_ fs.NodeGetattrer      = (*fnode)(nil)
	_ fs.NodeStatxer        = (*fnode)(nil)
	_ fs.NodeSetattrer      = (*fnode)(nil)
	_ fs.NodeOpendirHandler = (*fnode)(nil)
	_ fs.NodeMkdirer        = (*fnode)(nil)
	_ fs.NodeMknoder        = (*fnode)(nil)
	_ fs.NodeCreater        = (*fnode)(nil)
	_ fs.NodeTmpfiler       = (*fnode)(nil)
	_ fs.NodeOpener         = (*fnode)(nil)
	_ fs.NodeReader         = (*fnode)(nil)
	_ fs.NodeWriter         = (*fnode)(nil)
	_ fs.NodeFsyncer        = (*fnode)(nil)
	_ fs.NodeFlusher        = (*fnode)(nil)
	_ fs.NodeUnlinker       = (*fnode)(nil)
	_ fs.NodeRmdirer        = (*fnode)(nil)
	_ fs.NodeRenamer        = (*fnode)(nil)
	_ fs.NodeSymlinker      = (*fnode)(nil)
	_ fs.NodeReadlinker     = (*fnode)(nil)
	_ fs.NodeLinker         = (*fnode)(nil)
	_ fs.NodeGetxattrer     = (*fnode)(nil)
	_ fs.NodeSetxattrer     = (*fnode)(nil)
	_ fs.NodeRemovexattrer  = (*fnode)(nil)
	_ fs.NodeListxattrer    = (*fnode)(nil)
	_ fs.NodeStatfser       = (*fnode)(nil)
	_ fs.NodeAllocater      = (*fnode)(nil)
	_ fs.NodeCopyFileRanger = (*fnode)(nil)
)

// handle is an open file: whether the kernel passes its reads and writes
// through to the node's backing file.
type handle struct {
	f  *fnode
	n  *node // the file opened, for Session.open; nil for none
	pt bool
	fd int // the backing file, when pt
	// writes: opened for writing, counted in Session.writing.
	writes bool
}

// writeMode returns the cancel channel for a WRITE (see callModes):
// modeFlag for one that appends, and local. go-fuse gives a NodeWriter
// neither the request's flags nor its write flags. An append lands at the
// end as the session sees it, atomically with the write, so that
// appenders in two mounts never overwrite each other. Whether a write
// appends is the descriptor's O_APPEND as the request carries it
// (fcntl(F_SETFL) may have changed it since the open), and never for the
// kernel's write-back of a shared mapping's dirty pages (WRITE_CACHE),
// which go where they are mapped whatever descriptor carries them.
func writeMode(in *fuse.WriteIn, local bool) <-chan struct{} {
	return callMode(in.WriteFlags&fuse.WRITE_CACHE == 0 && in.Flags&syscall.O_APPEND != 0, local)
}

// ptHandle is a passthrough handle. Only it implements
// fs.FilePassthroughFder: go-fuse gives every handle that does the node's
// backing id while the node has one, so a handle the daemon serves must
// not.
type ptHandle struct{ *handle }

var (
	_ fs.FilePassthroughFder = ptHandle{}
	_ fs.FileReleaser        = ptHandle{}
	_ fs.FileReleaser        = (*handle)(nil)
)

// PassthroughFd is asked only while the mount has no passthrough open of
// the node; while it has one, go-fuse hands the new handle that one's id.
func (h ptHandle) PassthroughFd() (int, bool) { return h.fd, true }

func (h *handle) Release(ctx context.Context) syscall.Errno {
	f, s := h.f, h.f.sess()
	if h.n != nil {
		s.released(h.n, h.writes)
	}
	f.openMu.Lock()
	defer f.openMu.Unlock()
	f.opens--
	if h.pt {
		f.ptOpens--
		s.closeRoute(f.n.Load())
	}
	return 0
}

// open makes the handle of an open of f with flags, on the route the
// session chooses (Session.openRoute).
//
// The reply keeps the kernel's cached pages (FOPEN_KEEP_CACHE) when the
// open is served by the daemon and the content did not change since the
// mount's last open read it (fnode.cacheGen; Session.serveOpen says when
// the pages may not be kept at all).
//
// A write-only appender's first passthrough open copies the content into
// a backing file: content only a remote has is fetched first with no
// lock held (Session.localFirst), and a remote that fails leaves the open
// to the daemon.
func (f *fnode) open(ctx context.Context, flags uint32) (h fs.FileHandle, keep uint32, err error) {
	s, n := f.sess(), f.n.Load()
	if s.readOnly || flags&syscall.O_ACCMODE != syscall.O_WRONLY || flags&syscall.O_APPEND == 0 {
		// Only a write-only appender's route copies the content; a
		// reader's may adopt a parked copy of it.
		return f.openReader(ctx, flags)
	}
	err = s.localFirst(ctx, n, 0, maxBacked, func(ctx context.Context) (err error) {
		h, keep, err = f.openOnce(ctx, flags, false, nil)
		return err
	})
	if err != nil && fetchFailedErr(err) {
		// The remote cannot give the content a passthrough route would
		// copy: the daemon serves the open, as it does without a
		// backing file.
		s.log.Warn("no passthrough for a writer", "session", s.name, "err", err)
		return f.openOnce(cas.LocalOnly(ctx), flags, true, nil)
	}
	return h, keep, err
}

// openReader is openOnce for an open that may adopt a parked copy of the
// node's content, claimed and checked first with no lock held
// (claimParked).
func (f *fnode) openReader(ctx context.Context, flags uint32) (fs.FileHandle, uint32, error) {
	c, err := f.claimParked(ctx, flags)
	if err != nil {
		return nil, 0, err
	}
	h, keep, err := f.openOnce(ctx, flags, false, c)
	switch {
	case c == nil:
	case c.used:
		// Under freeze, as every drop of a backing file: one may write
		// the journal (a read copy's live record), which a flush must
		// not reset meanwhile. A claim is only made in a writable
		// session.
		s := f.sess()
		s.freeze.RLock()
		s.evictKept()
		s.freeze.RUnlock()
	default:
		f.sess().unclaim(c)
	}
	return h, keep, err
}

// openOnce is open, tried once; a first passthrough open that would copy
// content the local store lacks fails with cas.ErrNotLocal, having
// changed nothing, unless daemonIfRemote, when the daemon serves it.
func (f *fnode) openOnce(ctx context.Context, flags uint32, daemonIfRemote bool, claim *parkedClaim) (fs.FileHandle, uint32, error) {
	s, n := f.sess(), f.n.Load()
	if !s.readOnly {
		// A backing file made here must not appear in the middle of a
		// flush, which ingests every backing file at one point in time.
		s.freeze.RLock()
		defer s.freeze.RUnlock()
	}
	f.openMu.Lock()
	defer f.openMu.Unlock()
	var id uint64
	if acc := flags & syscall.O_ACCMODE; !s.readOnly && (acc == syscall.O_WRONLY || acc == syscall.O_RDWR && f.ptOpens > 0) {
		// A writer that may pass through: its backing file is named in
		// the journal (liveBacking).
		id = s.writeID(n)
	}
	r, fd, err := s.openRoute(ctx, n, flags, mountOpens{all: f.opens, pt: f.ptOpens, releasing: &f.m.releasing, daemonIfRemote: daemonIfRemote, jid: id, claim: claim})
	if err != nil {
		return nil, 0, err
	}
	h := &handle{f: f, pt: r != routeDaemon, fd: fd}
	var keep uint32
	if !h.pt && n.kind == manifest.KindFile {
		gen, err := s.serveOpen(ctx, n)
		if err != nil {
			return nil, 0, err
		}
		if gen != 0 && gen == f.cacheGen {
			keep = fuse.FOPEN_KEEP_CACHE
		}
		f.cacheGen = gen
		// An appender's writes bypass the page cache: through it the
		// kernel sends an append that crosses into a page it holds only
		// in part as two WRITEs. Where the kernel would refuse a shared
		// mapping of such a descriptor, it keeps the page cache.
		if flags&syscall.O_APPEND != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY && f.m.gate.directMmap() {
			keep |= fuse.FOPEN_DIRECT_IO
		}
	}
	f.opens++
	if n.kind == manifest.KindFile && !s.readOnly {
		h.n = n
		h.writes = s.opened(n, flags)
	}
	if h.pt {
		f.ptOpens++
		return ptHandle{h}, 0, nil
	}
	return h, keep, nil
}

// typeBits are the S_IFMT bits of kind k, and kindOf the kind of those
// bits (0 for none the tree holds).
func typeBits(k manifest.Kind) uint32 {
	switch k {
	case manifest.KindDir:
		return syscall.S_IFDIR
	case manifest.KindSymlink:
		return syscall.S_IFLNK
	case manifest.KindFifo:
		return syscall.S_IFIFO
	case manifest.KindSocket:
		return syscall.S_IFSOCK
	case manifest.KindCharDev:
		return syscall.S_IFCHR
	case manifest.KindBlockDev:
		return syscall.S_IFBLK
	default:
		return syscall.S_IFREG
	}
}

func kindOf(mode uint32) manifest.Kind {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		return manifest.KindFile
	case syscall.S_IFIFO:
		return manifest.KindFifo
	case syscall.S_IFSOCK:
		return manifest.KindSocket
	case syscall.S_IFCHR:
		return manifest.KindCharDev
	case syscall.S_IFBLK:
		return manifest.KindBlockDev
	}
	return 0
}

func fillAttr(a Attr, out *fuse.Attr) {
	out.Ino = a.Ino
	out.Size = uint64(a.Size)
	out.Blocks = uint64(a.Blocks)
	out.Blksize = 4096
	out.Mode = typeBits(a.Kind) | a.Mode
	out.Nlink = a.Nlink
	out.Owner = fuse.Owner{Uid: a.UID, Gid: a.GID}
	out.Rdev = a.Rdev
	out.Atime, out.Atimensec = splitNs(a.Atime)
	out.Mtime, out.Mtimensec = splitNs(a.Mtime)
	out.Ctime, out.Ctimensec = splitNs(a.Ctime)
}

func splitNs(ns int64) (uint64, uint32) {
	sec, nsec := ns/1e9, ns%1e9
	if nsec < 0 {
		sec, nsec = sec-1, nsec+1e9
	}
	return uint64(sec), uint32(nsec)
}

// joinNs is a time the kernel sends (seconds, two's complement in a u64,
// and nanoseconds) in nanoseconds, clamped to what an int64 holds (years
// 1677 to 2262), as ext4 clamps a time to its own range rather than wrap
// it: touch -d 2300-01-01 gives the latest time there is, not one in 1715.
func joinNs(sec uint64, nsec uint32) int64 {
	const (
		second = 1_000_000_000
		maxSec = math.MaxInt64 / second // 9223372036 (…036.854775807)
		minSec = math.MinInt64/second - 1
	)
	s := int64(sec)
	switch {
	case s > maxSec || s == maxSec && int64(nsec) > math.MaxInt64%second:
		return math.MaxInt64
	case s < minSec || s == minSec && int64(nsec) < second+math.MinInt64%second:
		return math.MinInt64
	}
	return s*second + int64(nsec)
}

func caller(ctx context.Context) Owner {
	if c, ok := fuse.FromContext(ctx); ok {
		return Owner{UID: c.Uid, GID: c.Gid}
	}
	return Owner{}
}

// dropFor returns the privilege drop of a change by ctx's caller: none for
// a privileged one. The kernel's rule is the lack of CAP_FSETID; the
// request carries only the caller's ids, so uid 0 stands for it.
func dropFor(ctx context.Context) privDrop {
	c, ok := fuse.FromContext(ctx)
	switch {
	case !ok:
		// No caller known: dropped as for one outside every group.
		return privDrop{on: true, gid: ^uint32(0)}
	case c.Uid == 0:
		return privDrop{}
	}
	return privDrop{on: true, gid: c.Gid, pid: c.Pid}
}

// callerInGroup reports whether the caller (gid, pid) is in group want:
// its file system gid, or a supplementary group, which a request does not
// carry; those are read from /proc (a caller that is gone, or from another
// pid namespace, counts as outside: dropping a privilege is the safe way to
// be wrong).
func callerInGroup(gid, pid, want uint32) bool {
	if gid == want {
		return true
	}
	if pid == 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if groups, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, g := range strings.Fields(groups) {
				if v, err := strconv.ParseUint(g, 10, 32); err == nil && uint32(v) == want {
					return true
				}
			}
			return false
		}
	}
	return false
}

// capMknod is CAP_MKNOD's bit in a capability set.
const capMknod = 27

// mayMknod reports whether ctx's caller has CAP_MKNOD in its effective
// set, read from /proc; a caller whose set cannot be read (gone, or in
// another pid namespace) may not.
func mayMknod(ctx context.Context) bool {
	c, ok := fuse.FromContext(ctx)
	return ok && c.Pid != 0 && hasCap(c.Pid, capMknod)
}

// hasCap reports whether process pid has capability bit in its effective
// set (CapEff in /proc/PID/status).
func hasCap(pid uint32, bit uint) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			set, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && set&(1<<bit) != 0
		}
	}
	return false
}

func (f *fnode) sess() *Session { return f.m.sess }

// child returns the fnode for n below f, reusing the one the mount has.
func (f *fnode) child(ctx context.Context, n *node, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	a, err := f.sess().Getattr(ctx, n)
	if err != nil {
		return nil, f.m.toErrno("getattr", f, err)
	}
	fillAttr(a, &out.Attr)
	t := f.m.cacheTimeout()
	out.SetEntryTimeout(t)
	out.SetAttrTimeout(t)
	return f.NewInode(ctx, f.m.wrap(n), fs.StableAttr{Mode: typeBits(n.kind), Ino: n.ino}), 0
}

func (f *fnode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	c, err := f.sess().lookup(ctx, f.n.Load(), name)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) && f.m.shortCache.Load() {
			// A non-zero timeout here keeps go-fuse from caching the
			// absent name: another mount may create it.
			out.SetEntryTimeout(shortCacheTimeout)
		}
		return nil, f.m.toErrno("lookup", f, err)
	}
	return f.child(ctx, c, out)
}

func (f *fnode) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	a, err := f.sess().Getattr(ctx, f.n.Load())
	if err != nil {
		return f.m.toErrno("getattr", f, err)
	}
	f.fillAttrOut(a, out)
	return 0
}

// Statx answers what Getattr does, and the birth time when it is known
// (STATX_BTIME in the mask); the kernel asks only for a statx(2) that
// wants more than stat(2) gives.
func (f *fnode) Statx(ctx context.Context, _ fs.FileHandle, _ uint32, _ uint32, out *fuse.StatxOut) syscall.Errno {
	a, err := f.sess().Getattr(ctx, f.n.Load())
	if err != nil {
		return f.m.toErrno("statx", f, err)
	}
	fillStatx(a, &out.Statx)
	if f == f.m.root {
		out.Ino = f.m.rootIno
	}
	out.SetTimeout(f.m.cacheTimeout())
	return 0
}

// fillStatx is fillAttr for a statx reply.
func fillStatx(a Attr, out *fuse.Statx) {
	var attr fuse.Attr
	fillAttr(a, &attr)
	out.Mask = unix.STATX_BASIC_STATS
	out.Blksize = attr.Blksize
	out.Nlink = attr.Nlink
	out.Uid, out.Gid = attr.Uid, attr.Gid
	out.Mode = uint16(attr.Mode)
	out.Ino = attr.Ino
	out.Size = attr.Size
	out.Blocks = attr.Blocks
	out.Atime = fuse.SxTime{Sec: attr.Atime, Nsec: attr.Atimensec}
	out.Mtime = fuse.SxTime{Sec: attr.Mtime, Nsec: attr.Mtimensec}
	out.Ctime = fuse.SxTime{Sec: attr.Ctime, Nsec: attr.Ctimensec}
	out.RdevMajor, out.RdevMinor = unix.Major(uint64(a.Rdev)), unix.Minor(uint64(a.Rdev))
	if a.Btime != 0 {
		out.Mask |= unix.STATX_BTIME
		sec, nsec := splitNs(a.Btime)
		out.Btime = fuse.SxTime{Sec: sec, Nsec: nsec}
	}
}

func (f *fnode) fillAttrOut(a Attr, out *fuse.AttrOut) {
	fillAttr(a, &out.Attr)
	if f == f.m.root {
		// The mountpoint keeps its inode number across a restore, which
		// gives the mount a new root node.
		out.Ino = f.m.rootIno
	}
	out.SetTimeout(f.m.cacheTimeout())
}

func (f *fnode) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var a SetAttr
	if m, ok := in.GetMode(); ok {
		a.Mode = &m
	}
	if u, ok := in.GetUID(); ok {
		a.UID = &u
	}
	if g, ok := in.GetGID(); ok {
		a.GID = &g
	}
	if sz, ok := in.GetSize(); ok {
		s := int64(sz)
		a.Size = &s
	}
	// FATTR_KILL_SUIDGID comes with a truncate. A SETATTR that sets
	// nothing is the kernel's file_remove_privs for a write it passes
	// through to a backing file (CAP_HANDLE_KILLPRIV_V2 strips what it
	// would have set), sent by the writer, and only by one without
	// CAP_FSETID: the daemon sees no passthrough write, but this it sees.
	if in.Valid&fuse.FATTR_KILL_SUIDGID != 0 || in.Valid&^(fuse.FATTR_FH|fuse.FATTR_LOCKOWNER) == 0 {
		a.Drop = dropFor(ctx)
	}
	if a.UID != nil || a.GID != nil {
		a.Chowner = dropFor(ctx)
	}
	if in.Valid&fuse.FATTR_ATIME != 0 {
		if in.Valid&fuse.FATTR_ATIME_NOW != 0 {
			a.AtimeNow = true
		} else {
			t := joinNs(in.Atime, in.Atimensec)
			a.Atime = &t
		}
	}
	if in.Valid&fuse.FATTR_MTIME != 0 {
		if in.Valid&fuse.FATTR_MTIME_NOW != 0 {
			a.MtimeNow = true
		} else {
			t := joinNs(in.Mtime, in.Mtimensec)
			a.Mtime = &t
		}
	}
	n := f.n.Load()
	ctx = storeCtx(ctx)
	if n.isDir() {
		// The reply counts the directory's subdirectories, which loads
		// it: done first, so that a tree only a remote has fails the
		// request (cas.ErrNotLocal on a ring thread) before it changes
		// anything, not after.
		if _, err := f.sess().subdirCount(ctx, n); err != nil {
			return f.m.toErrno("setattr", f, err)
		}
	}
	if err := f.sess().Setattr(ctx, n, a); err != nil {
		return f.m.toErrno("setattr", f, err)
	}
	// Setattr looked at a backing file already; a write racing this
	// reply makes the kernel drop it (attr_version) either way.
	attrs, err := f.sess().attrs(ctx, n)
	if err != nil {
		return f.m.toErrno("setattr", f, err)
	}
	f.fillAttrOut(attrs, out)
	return 0
}

func (f *fnode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	mode, who := creator(ctx, mode)
	c, err := f.sess().Mkdir(ctx, f.n.Load(), name, mode, who)
	if err != nil {
		return nil, f.m.toErrno("mkdir", f, err)
	}
	return f.child(ctx, c, out)
}

// Mknod makes a regular file, a fifo, a socket (bind(2) of a Unix socket
// makes one; the kernel serves connections to it, never the daemon) or a
// device node. A device node needs CAP_MKNOD, as mknod(2) checks before
// any filesystem sees the call; the daemon checks again, so that a caller
// the kernel let through for another reason (none today) is refused too.
func (f *fnode) Mknod(ctx context.Context, name string, mode uint32, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	var c *node
	var err error
	mode, who := creator(ctx, mode)
	switch k := kindOf(mode); {
	case k == manifest.KindFile:
		c, err = f.sess().Create(ctx, f.n.Load(), name, mode, who)
	case k == 0:
		return nil, syscall.EINVAL
	case k.IsDevice() && !mayMknod(ctx):
		return nil, syscall.EPERM
	default:
		c, err = f.sess().Mknod(ctx, f.n.Load(), name, k, mode, rdev, who)
	}
	if err != nil {
		return nil, f.m.toErrno("mknod", f, err)
	}
	return f.child(ctx, c, out)
}

func (f *fnode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	mode, who := creator(ctx, mode)
	c, err := f.sess().Create(ctx, f.n.Load(), name, mode, who)
	if err != nil {
		return nil, nil, 0, f.m.toErrno("create", f, err)
	}
	return f.openNew(ctx, "create", c, flags, out)
}

// Tmpfile makes a file with no name in f, open with flags (O_TMPFILE):
// on the route an open of a new file takes (Create's), with a link count
// of 0. Unless O_EXCL was given, linkat may name it later (Session.Link).
func (f *fnode) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	mode, who := creator(ctx, mode)
	c, err := f.sess().Tmpfile(f.n.Load(), mode, who, flags&syscall.O_EXCL == 0)
	if err != nil {
		return nil, nil, 0, f.m.toErrno("tmpfile", f, err)
	}
	return f.openNew(ctx, "tmpfile", c, flags&^unix.O_TMPFILE, out)
}

// openNew answers a CREATE or TMPFILE of c, a new file: its entry, and a
// handle open with flags.
func (f *fnode) openNew(ctx context.Context, op string, c *node, flags uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	in, errno := f.child(ctx, c, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	h, keep, err := in.Operations().(*fnode).open(ctx, flags)
	if err != nil {
		return nil, nil, 0, f.m.toErrno(op, f, err)
	}
	return in, h, keep, 0
}

func (f *fnode) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	n := f.n.Load()
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC) != 0 && f.sess().readOnly {
		return nil, 0, syscall.EROFS
	}
	sctx := storeCtx(ctx)
	if flags&syscall.O_TRUNC != 0 && n.kind == manifest.KindFile {
		zero := int64(0)
		if err := f.sess().Setattr(sctx, n, SetAttr{Size: &zero, Drop: dropFor(ctx)}); err != nil {
			return nil, 0, f.m.toErrno("open", f, err)
		}
	}
	h, keep, err := f.open(sctx, flags)
	if err != nil {
		return nil, 0, f.m.toErrno("open", f, err)
	}
	return h, f.openedToRead(ctx, flags, keep, h), 0
}

func (f *fnode) Read(ctx context.Context, _ fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n := f.n.Load()
	mode := callBits(ctx)
	if mode&modeLocal != 0 {
		ctx = localCtx
	}
	k, err := f.sess().Read(ctx, n, dest, off)
	if err != nil {
		return nil, f.m.toErrno("read", f, err)
	}
	if mode&modeFlag == 0 { // O_NOATIME
		f.m.accessed(n)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (f *fnode) Write(ctx context.Context, _ fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	op := WriteOp{Append: appending(ctx), Drop: dropFor(ctx)}
	k, err := f.sess().Write(storeCtx(ctx), f.n.Load(), data, off, op)
	if err != nil {
		return 0, f.m.toErrno("write", f, err)
	}
	return uint32(k), 0
}

func (f *fnode) Fsync(ctx context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	if f.sess().readOnly {
		return 0
	}
	if err := f.sess().Fsync(storeCtx(ctx), f.n.Load()); err != nil {
		return f.m.toErrno("fsync", f, err)
	}
	return 0
}

// Flush (close) does not make data durable, as on a local filesystem, and
// has nothing else to do: ENOSYS tells the kernel so, and it stops sending
// FLUSH on every close, a round trip the closer waits for. (POSIX locks are
// the kernel's own and are dropped on close all the same.)
func (f *fnode) Flush(ctx context.Context, _ fs.FileHandle) syscall.Errno { return syscall.ENOSYS }

func (f *fnode) Unlink(ctx context.Context, name string) syscall.Errno {
	return f.m.toErrno("unlink", f, f.sess().Unlink(ctx, f.n.Load(), name))
}

func (f *fnode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return f.m.toErrno("rmdir", f, f.sess().Rmdir(ctx, f.n.Load(), name))
}

func (f *fnode) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*fnode)
	if !ok || np.m != f.m {
		return syscall.EXDEV
	}
	return f.m.toErrno("rename", f, f.sess().Rename(ctx, f.n.Load(), name, np.n.Load(), newName, flags))
}

func (f *fnode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	c, err := f.sess().Symlink(ctx, f.n.Load(), name, target, caller(ctx))
	if err != nil {
		return nil, f.m.toErrno("symlink", f, err)
	}
	return f.child(ctx, c, out)
}

func (f *fnode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	n := f.n.Load()
	t, err := f.sess().Readlink(n)
	if err != nil {
		return nil, f.m.toErrno("readlink", f, err)
	}
	f.m.accessed(n)
	return []byte(t), 0
}

func (f *fnode) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	t, ok := target.(*fnode)
	if !ok || t.m != f.m {
		return nil, syscall.EXDEV
	}
	n := t.n.Load()
	if err := f.sess().Link(ctx, f.n.Load(), name, n); err != nil {
		return nil, f.m.toErrno("link", f, err)
	}
	return f.child(ctx, n, out)
}

func (f *fnode) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	v, err := f.sess().GetXattr(f.n.Load(), attr)
	if err != nil {
		return 0, f.m.toErrno("getxattr", f, err)
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (f *fnode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return f.m.toErrno("setxattr", f, f.sess().SetXattr(f.n.Load(), attr, data, flags))
}

func (f *fnode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return f.m.toErrno("removexattr", f, f.sess().RemoveXattr(f.n.Load(), attr))
}

func (f *fnode) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	var need int
	// The request carries the caller's ids, not its capabilities: uid 0
	// stands for CAP_SYS_ADMIN.
	names := f.sess().ListXattr(f.n.Load(), caller(ctx).UID == 0)
	for _, n := range names {
		need += len(n) + 1
	}
	if len(dest) < need {
		return uint32(need), syscall.ERANGE
	}
	off := 0
	for _, n := range names {
		off += copy(dest[off:], n)
		dest[off] = 0
		off++
	}
	return uint32(need), 0
}

func (f *fnode) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	var st syscall.Statfs_t
	dir := f.m.engine.storeDir
	if dir == "" {
		dir = "/"
	}
	if err := syscall.Statfs(dir, &st); err != nil {
		return f.m.toErrno("statfs", f, err)
	}
	out.Blocks = st.Blocks
	out.Bfree = st.Bfree
	out.Bavail = st.Bavail
	out.Files = st.Files
	out.Ffree = st.Ffree
	out.Bsize = uint32(st.Bsize)
	out.Frsize = uint32(st.Frsize)
	out.NameLen = manifest.MaxNameLen
	return 0
}

func (f *fnode) Allocate(ctx context.Context, _ fs.FileHandle, off uint64, size uint64, mode uint32) syscall.Errno {
	return f.m.toErrno("fallocate", f, f.sess().Allocate(ctx, f.n.Load(), int64(off), int64(size), mode, dropFor(ctx)))
}

func (f *fnode) CopyFileRange(ctx context.Context, _ fs.FileHandle, offIn uint64, out *fs.Inode, _ fs.FileHandle, offOut uint64, length uint64, flags uint64) (uint32, syscall.Errno) {
	dst, ok := out.Operations().(*fnode)
	if !ok || dst.m.sess != f.m.sess || flags != 0 {
		return 0, syscall.EXDEV
	}
	src := f.n.Load()
	k, err := f.sess().CopyRange(ctx, src, int64(offIn), dst.n.Load(), int64(offOut), int64(min(length, 1<<30)), dropFor(ctx))
	if err != nil && k == 0 {
		return 0, f.m.toErrno("copy_file_range", f, err)
	}
	f.m.accessed(src)
	return uint32(k), 0
}

// rawGate stands between the kernel and go-fuse's node bridge. It counts
// the RELEASE requests in flight in a mount (see open), serves
// directories without OPENDIR (dirstream.go), and times requests for the
// engine's Observer (observe.go).
type rawGate struct {
	fuse.RawFileSystem
	m      *Mount
	obs    Observer // nil: nothing is timed; set before the mount serves
	server atomic.Pointer[fuse.Server]
	// noOpendir is set once OPENDIR has been answered with ENOSYS.
	noOpendir atomic.Bool
}

// directMmap reports whether the kernel agreed to map files opened with
// FOPEN_DIRECT_IO shared (FUSE_DIRECT_IO_ALLOW_MMAP).
func (g *rawGate) directMmap() bool {
	s := g.server.Load()
	return s != nil && s.KernelSettings().Flags64()&fuse.CAP_DIRECT_IO_ALLOW_MMAP != 0
}

func (g *rawGate) Init(s *fuse.Server) {
	g.server.Store(s)
	g.RawFileSystem.Init(s)
}

func (g *rawGate) Release(_ <-chan struct{}, in *fuse.ReleaseIn) {
	t := g.begin()
	g.m.releasing.Add(1)
	defer g.m.releasing.Add(-1)
	g.RawFileSystem.Release(nil, in) // never interrupted (nointr.go)
	g.end(OpRelease, t, fuse.OK)
}

// OpenDir answers ENOSYS, which switches the kernel to no-opendir mode for
// the rest of the connection, when the kernel offers that mode and the
// mount alone shows its part of the session.
func (g *rawGate) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := g.begin()
	return g.end(OpOpenDir, t, g.openDir(in, out))
}

func (g *rawGate) openDir(in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	if s := g.server.Load(); s != nil && s.KernelSettings().Flags64()&fuse.CAP_NO_OPENDIR_SUPPORT != 0 && !g.m.shortCache.Load() {
		g.noOpendir.Store(true)
		return fuse.ENOSYS
	}
	return g.RawFileSystem.OpenDir(nil, in, out)
}

func (g *rawGate) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := g.begin()
	return g.end(OpReadDir, t, g.withDir(in, func(in *fuse.ReadIn) fuse.Status { return g.RawFileSystem.ReadDir(nil, in, out) }))
}

func (g *rawGate) ReadDirPlus(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	t := g.begin()
	return g.end(OpReadDirPlus, t, g.withDir(in, func(in *fuse.ReadIn) fuse.Status { return g.RawFileSystem.ReadDirPlus(nil, in, out) }))
}

// withDir calls read with in, giving it a handle opened for this request
// alone when the kernel sent none (no-opendir mode).
func (g *rawGate) withDir(in *fuse.ReadIn, read func(*fuse.ReadIn) fuse.Status) fuse.Status {
	if in.Fh != 0 {
		return read(in)
	}
	var opened fuse.OpenOut
	if st := g.RawFileSystem.OpenDir(nil, &fuse.OpenIn{InHeader: in.InHeader, Flags: syscall.O_RDONLY}, &opened); !st.Ok() {
		return st
	}
	defer g.RawFileSystem.ReleaseDir(&fuse.ReleaseIn{InHeader: in.InHeader, Fh: opened.Fh})
	with := *in
	with.Fh = opened.Fh
	return read(&with)
}

func (g *rawGate) ReleaseDir(in *fuse.ReleaseIn) {
	if in.Fh != 0 {
		t := g.begin()
		g.RawFileSystem.ReleaseDir(in)
		g.end(OpReleaseDir, t, fuse.OK)
	}
}
