package fusefs

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// The operations below are the live tree's whole mutable surface; the FUSE
// layer translates kernel requests into them. They return syscall.Errno
// for POSIX outcomes and wrapped errors otherwise (see errno.go).

// Owner is who creates a node, and the creator's umask, applied unless
// the directory has a default ACL (acl.go).
type Owner struct{ UID, GID, Umask uint32 }

func now() int64 { return time.Now().UnixNano() }

// begin starts a mutating operation that will add names (checked first):
// it holds off a flush until done is called.
func (s *Session) begin(names ...string) (done func(), err error) {
	if s.readOnly {
		return nil, syscall.EROFS
	}
	for _, name := range names {
		if err := checkName(name); err != nil {
			return nil, err
		}
	}
	s.freeze.RLock()
	return s.freeze.RUnlock, nil
}

func checkName(name string) error {
	if len(name) > manifest.MaxNameLen {
		return syscall.ENAMETOOLONG
	}
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return syscall.EINVAL
	}
	return nil
}

// removed reports whether dir was removed from the tree (a process may
// still sit in it). Called with treeMu held.
func (s *Session) removed(dir *node) bool {
	for d := dir; d != nil; d = d.parent {
		if d == s.root {
			return false
		}
	}
	return true
}

// touchDir records that dir's names changed, in a way the journal does
// not hold. Called with treeMu held.
func (s *Session) touchDir(dir *node, t int64) {
	dirTimes(dir, t)
	s.markDirty(dir)
}

// dirTimes dates a change of dir's names. Called with treeMu held.
func dirTimes(dir *node, t int64) {
	dir.mu.Lock()
	dir.mtime, dir.ctime = t, t
	dir.mu.Unlock()
}

// newChild creates a node of the given kind under dir.
func (s *Session) newChild(ctx context.Context, dir *node, name string, kind manifest.Kind, mode uint32, who Owner, init func(*node)) (*node, error) {
	done, err := s.begin(name)
	if err != nil {
		return nil, err
	}
	defer done()
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if !dir.isDir() {
		return nil, syscall.ENOTDIR
	}
	if err := s.load(ctx, dir); err != nil {
		return nil, err
	}
	if s.removed(dir) {
		return nil, syscall.ENOENT
	}
	if _, ok := dir.children[name]; ok {
		return nil, syscall.EEXIST
	}
	t := now()
	c, err := s.newNode(dir, kind, mode, who, t)
	if err != nil {
		return nil, err
	}
	if init != nil {
		init(c)
	}
	ch := s.newChange()
	dirID := ch.id(dir)
	s.attach(dir, name, c, true)
	dirTimes(dir, t)
	id := ch.newID(c)
	ch.add(journalRecord{kind: recCreate, id: id, dir: dirID, name: name, nkind: kind, rdev: c.rdev, data: []byte(c.target)})
	ch.touch(dir, dirID)
	ch.touch(c, id)
	ch.commit()
	return c, nil
}

// Create makes an empty regular file.
func (s *Session) Create(ctx context.Context, dir *node, name string, mode uint32, who Owner) (*node, error) {
	return s.newChild(ctx, dir, name, manifest.KindFile, mode, who, func(n *node) { n.data = &fileData{base: manifest.Entry{Kind: manifest.KindFile}} })
}

// Tmpfile makes an empty regular file with no name, as open(2) with
// O_TMPFILE does: the checks and the owner are newChild's, but no
// directory holds it (nlink 0), so no flush stores it in a tree and no
// journal record names it. A linkable one may be given a name by Link
// (linkat from /proc/self/fd); otherwise it lives as long as its
// handles, like a file unlinked while open.
func (s *Session) Tmpfile(dir *node, mode uint32, who Owner, linkable bool) (*node, error) {
	done, err := s.begin()
	if err != nil {
		return nil, err
	}
	defer done()
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if !dir.isDir() {
		return nil, syscall.ENOTDIR
	}
	if s.removed(dir) {
		return nil, syscall.ENOENT // a directory rmdir removed, where a process sits
	}
	c, err := s.newNode(dir, manifest.KindFile, mode, who, now())
	if err != nil {
		return nil, err
	}
	c.linkable = linkable
	c.data = &fileData{base: manifest.Entry{Kind: manifest.KindFile}}
	if linkable {
		// Its writes and its link may be journaled: the record makes it.
		ch := s.newChange()
		id := ch.newID(c)
		ch.add(journalRecord{kind: recCreate, id: id, nkind: manifest.KindFile})
		c.mu.Lock()
		ch.add(c.attrRecord(id))
		c.mu.Unlock()
		ch.commit()
	}
	return c, nil
}

// newNode makes a node of kind, new in dir at t, named nowhere yet: its
// owner who, its group dir's under a setgid directory (BSD semantics, as
// on ext4), and its mode masked by dir's default ACL, which it inherits,
// or else by the caller's umask. Called with treeMu held.
func (s *Session) newNode(dir *node, kind manifest.Kind, mode uint32, who Owner, t int64) (*node, error) {
	c := &node{ino: s.newIno(), kind: kind, sess: s, mode: mode & 0o7777, uid: who.UID, gid: who.GID, mtime: t, ctime: t, atime: t, btime: t}
	dir.mu.Lock()
	defer dir.mu.Unlock()
	if dir.mode&syscall.S_ISGID != 0 {
		c.gid = dir.gid
		if kind == manifest.KindDir {
			c.mode |= syscall.S_ISGID
		}
	}
	if err := c.inheritACL(dir.xattrs[aclDefaultXattr], who.Umask); err != nil {
		return nil, err
	}
	return c, nil
}

// Mkdir makes an empty directory. Its tree node, the empty one, is stored
// by the next flush (a new directory is dirty, and a flush encodes every
// dirty directory), not on the request's path: a store lookup there cost
// a mkdir more than its round trips.
func (s *Session) Mkdir(ctx context.Context, dir *node, name string, mode uint32, who Owner) (*node, error) {
	return s.newChild(ctx, dir, name, manifest.KindDir, mode, who, func(n *node) {
		n.tree = manifest.EmptyTreeRef()
		n.children = make(map[string]*node)
	})
}

// Symlink stores a symbolic link; the target is never followed here.
func (s *Session) Symlink(ctx context.Context, dir *node, name, target string, who Owner) (*node, error) {
	if target == "" || len(target) > 4095 || strings.IndexByte(target, 0) >= 0 {
		return nil, syscall.EINVAL
	}
	return s.newChild(ctx, dir, name, manifest.KindSymlink, 0o777, who, func(n *node) { n.target = target })
}

// Mknod makes a special file: a fifo, a socket or a device node (rdev
// for a device node only). Whether the caller may make a device node is
// the caller's check (fnode.Mknod), as it is the kernel's for ext4.
func (s *Session) Mknod(ctx context.Context, dir *node, name string, kind manifest.Kind, mode, rdev uint32, who Owner) (*node, error) {
	if !kind.IsSpecial() {
		return nil, syscall.EINVAL
	}
	if !kind.IsDevice() {
		rdev = 0
	}
	return s.newChild(ctx, dir, name, kind, mode, who, func(n *node) { n.rdev = rdev })
}

// Link adds a hard link name in dir to target, any non-directory (as
// link(2) does on Linux, which never follows a symlink).
func (s *Session) Link(ctx context.Context, dir *node, name string, target *node) error {
	done, err := s.begin(name)
	if err != nil {
		return err
	}
	defer done()
	if target.isDir() {
		return syscall.EPERM
	}
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if err := s.load(ctx, dir); err != nil {
		return err
	}
	if s.removed(dir) {
		return syscall.ENOENT
	}
	if _, ok := dir.children[name]; ok {
		return syscall.EEXIST
	}
	first := target.nlink == 0
	if first && !target.linkable {
		return syscall.ENOENT // linking an unlinked file back is not supported
	}
	if !first && target.linkID == 0 {
		target.linkID = newLinkID()
		s.links[target.linkID] = target
	}
	ch := s.newChange()
	dirID, id := ch.id(dir), ch.id(target)
	t := now()
	s.attach(dir, name, target, true)
	target.linkable = false // named now: an unlink makes it an unlinked file
	target.mu.Lock()
	target.ctime = t
	target.mu.Unlock()
	dirTimes(dir, t)
	ch.add(journalRecord{kind: recLink, id: id, dir: dirID, name: name})
	ch.touch(dir, dirID)
	ch.touch(target, id)
	ch.commit()
	return nil
}

// removeChild runs fn on the node named name in dir, with writers of the
// tree held off; fn detaches it.
func (s *Session) removeChild(ctx context.Context, dir *node, name string, fn func(c *node) error) error {
	done, err := s.begin()
	if err != nil {
		return err
	}
	defer done()
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	if err := s.load(ctx, dir); err != nil {
		return err
	}
	c, ok := dir.children[name]
	if !ok {
		return syscall.ENOENT
	}
	return fn(c)
}

// Unlink removes a non-directory name. An open file stays readable and
// writable through its handles until they close.
func (s *Session) Unlink(ctx context.Context, dir *node, name string) error {
	return s.removeChild(ctx, dir, name, func(c *node) error {
		if c.isDir() {
			return syscall.EISDIR
		}
		if c.nlink > 1 && countNames(c) < int(c.nlink) {
			// Other names live in directories not loaded yet; load them so
			// the remaining entries get the new link count.
			if err := s.loadAll(ctx, s.root); err != nil {
				return err
			}
		}
		ch := s.newChange()
		dirID, id := ch.id(dir), ch.id(c)
		s.detach(dir, name)
		t := now()
		s.ctimeNow(c, t)
		dirTimes(dir, t)
		ch.add(journalRecord{kind: recUnlink, dir: dirID, name: name})
		ch.touch(dir, dirID)
		if c.nlink > 0 {
			ch.touch(c, id)
		}
		ch.commit()
		return nil
	})
}

// emptyDir checks that d is a directory with no names: what rmdir and a
// rename over a directory need. Called with treeMu held.
func (s *Session) emptyDir(ctx context.Context, d *node) error {
	if !d.isDir() {
		return syscall.ENOTDIR
	}
	if err := s.load(ctx, d); err != nil {
		return err
	}
	if len(d.children) > 0 {
		return syscall.ENOTEMPTY
	}
	return nil
}

// Rmdir removes an empty directory.
func (s *Session) Rmdir(ctx context.Context, dir *node, name string) error {
	return s.removeChild(ctx, dir, name, func(c *node) error {
		if err := s.emptyDir(ctx, c); err != nil {
			return err
		}
		ch := s.newChange()
		dirID := ch.id(dir)
		s.detach(dir, name)
		dirTimes(dir, now())
		ch.add(journalRecord{kind: recUnlink, dir: dirID, name: name, flags: 1})
		ch.touch(dir, dirID)
		ch.commit()
		return nil
	})
}

// Rename flags, as in renameat2(2).
const (
	RenameNoReplace = 0x1
	RenameExchange  = 0x2
)

// Rename moves name in dir to newName in newDir.
func (s *Session) Rename(ctx context.Context, dir *node, name string, newDir *node, newName string, flags uint32) error {
	done, err := s.begin(newName)
	if err != nil {
		return err
	}
	defer done()
	if flags&^(RenameNoReplace|RenameExchange) != 0 || flags == RenameNoReplace|RenameExchange {
		return syscall.EINVAL
	}
	s.treeMu.Lock()
	defer s.treeMu.Unlock()
	from, to := renameEnd{dir: dir, name: name}, renameEnd{dir: newDir, name: newName}
	exists, err := s.renameEnds(ctx, &from, &to)
	if err != nil {
		return err
	}
	src, dst := from.n, to.n
	ch := s.newChange()
	ids := renameIDs{dir: ch.id(dir), newDir: ch.id(newDir), src: ch.id(src)}
	if exists {
		ids.dst = ch.id(dst)
	}
	t := now()
	switch {
	case flags&RenameExchange != 0:
		if err := s.exchange(from, to, exists, t); err != nil {
			return err
		}
		ch.touch(dst, ids.dst)
	case exists && flags&RenameNoReplace != 0:
		return syscall.EEXIST
	case exists && dst == src:
		return nil // two names of one file: nothing to do (POSIX)
	case exists:
		if err := s.unlinkTarget(ctx, src, to, t); err != nil {
			return err
		}
		if !dst.isDir() && dst.nlink > 0 {
			ch.touch(dst, ids.dst)
		}
		fallthrough
	default:
		s.detach(dir, name)
		s.attach(newDir, newName, src, true)
	}
	s.ctimeNow(src, t)
	dirTimes(dir, t)
	dirTimes(newDir, t)
	ch.add(journalRecord{kind: recRename, dir: ids.dir, name: name, dir2: ids.newDir, name2: newName, flags: flags})
	ch.touch(src, ids.src)
	ch.touch(dir, ids.dir)
	if newDir != dir {
		ch.touch(newDir, ids.newDir)
	}
	ch.commit()
	return nil
}

// renameIDs are the journal ids of a rename's nodes.
type renameIDs struct{ dir, newDir, src, dst uint64 }

// renameEnd is one end of a rename: name in dir, and n the node it names
// (nil for none).
type renameEnd struct {
	dir  *node
	name string
	n    *node
}

// renameEnds checks a rename from one end to the other and looks up what
// each names: from's node, and to's if it exists (which it reports).
// Called with treeMu held.
func (s *Session) renameEnds(ctx context.Context, from, to *renameEnd) (bool, error) {
	if err := s.load(ctx, from.dir); err != nil {
		return false, err
	}
	if !to.dir.isDir() {
		return false, syscall.ENOTDIR
	}
	if err := s.load(ctx, to.dir); err != nil {
		return false, err
	}
	if s.removed(from.dir) || s.removed(to.dir) {
		return false, syscall.ENOENT
	}
	src, ok := from.dir.children[from.name]
	if !ok {
		return false, syscall.ENOENT
	}
	dst, exists := to.dir.children[to.name]
	if src.isDir() && isAncestor(src, to.dir) {
		return false, syscall.EINVAL // a directory cannot move below itself
	}
	from.n, to.n = src, dst
	return exists, nil
}

// exchange swaps the nodes of a rename's two ends (RENAME_EXCHANGE), of
// which to exists if exists is set. Called with treeMu held.
func (s *Session) exchange(from, to renameEnd, exists bool, t int64) error {
	if !exists {
		return syscall.ENOENT
	}
	if to.n.isDir() && isAncestor(to.n, from.dir) {
		return syscall.EINVAL
	}
	s.detach(from.dir, from.name)
	s.detach(to.dir, to.name)
	s.attach(from.dir, from.name, to.n, true)
	s.attach(to.dir, to.name, from.n, true)
	s.ctimeNow(to.n, t)
	return nil
}

// unlinkTarget removes the node that a rename of src replaces from its
// end to, if src may replace it. Called with treeMu held.
func (s *Session) unlinkTarget(ctx context.Context, src *node, to renameEnd, t int64) error {
	dst := to.n
	if src.isDir() {
		if err := s.emptyDir(ctx, dst); err != nil {
			return err
		}
	} else if dst.isDir() {
		return syscall.EISDIR
	}
	s.detach(to.dir, to.name)
	s.ctimeNow(dst, t)
	return nil
}

func (s *Session) ctimeNow(n *node, t int64) {
	n.mu.Lock()
	n.ctime = t
	n.mu.Unlock()
}

// isAncestor reports whether a is d or one of d's ancestors. Called with
// treeMu held.
func isAncestor(a, d *node) bool {
	for ; d != nil; d = d.parent {
		if d == a {
			return true
		}
	}
	return false
}

// SetAttr is a change of attributes; nil fields stay as they are.
type SetAttr struct {
	Mode         *uint32
	UID, GID     *uint32
	Size         *int64
	Atime, Mtime *int64 // nanoseconds
	AtimeNow     bool
	MtimeNow     bool
	// Drop clears setuid, setgid and file capabilities as a write would
	// (truncate by an unprivileged caller; see privDrop).
	Drop privDrop
	// Chowner is the caller of a chown, which drops privileges for every
	// caller (see Setattr).
	Chowner privDrop
}

// privDrop is a change to a file by a caller without CAP_FSETID (on),
// which drops the privileges the file grants (see killPriv); the zero
// value is a caller with it. The kernel leaves this to the daemon
// (CAP_HANDLE_KILLPRIV_V2), which spares a getxattr round trip on every
// write.
type privDrop struct {
	on       bool
	gid, pid uint32 // the caller's, for its groups
}

// apply drops n's privileges for p's caller. Called with n.mu held;
// reports whether anything changed.
func (p privDrop) apply(n *node) bool {
	if !p.on || n.isDir() {
		return false
	}
	return n.killPriv(p.inGroup(n.gid))
}

// inGroup reports whether the caller is in group gid, or is privileged.
func (p privDrop) inGroup(gid uint32) bool {
	return !p.on || callerInGroup(p.gid, p.pid, gid)
}

// killPriv drops the privileges a file grants when it changes: setuid;
// setgid if group-executable, or if the caller (inGroup) is not in the
// file's group; and the security.capability xattr, as the kernel does on
// ext4 (setattr_should_drop_suidgid). Called with n.mu held; reports
// whether anything changed.
func (n *node) killPriv(inGroup bool) bool {
	changed := false
	if n.mode&syscall.S_ISUID != 0 {
		n.mode &^= syscall.S_ISUID
		changed = true
	}
	if n.mode&syscall.S_ISGID != 0 && (n.mode&syscall.S_IXGRP != 0 || !inGroup) {
		n.mode &^= syscall.S_ISGID
		changed = true
	}
	if _, ok := n.xattrs[capabilityXattr]; ok {
		delete(n.xattrs, capabilityXattr)
		changed = true
	}
	return changed
}

const capabilityXattr = "security.capability"

// Setattr applies a to n.
func (s *Session) Setattr(ctx context.Context, n *node, a SetAttr) error {
	if a.Size == nil {
		return s.setattr(ctx, n, a)
	}
	// A truncate into a stored chunk keeps its head: that chunk is
	// fetched with no lock held (localFirst).
	return s.localFirst(ctx, n, *a.Size, *a.Size+1, func(ctx context.Context) error { return s.setattr(ctx, n, a) })
}

// setattr is Setattr, tried once; under cas.LocalOnly a truncate that
// needs a stored chunk only a remote has fails before it changes n.
func (s *Session) setattr(ctx context.Context, n *node, a SetAttr) error {
	done, err := s.begin()
	if err != nil {
		return err
	}
	defer done()
	ch, id := s.nodeChange(n)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.data != nil && n.data.backing != nil && a.Size == nil {
		b := n.data.backing
		// Writes passed through before this change happened before it
		// (a chmod +s after them keeps its bits).
		var err error
		if b.isStaged() {
			_, err = n.observe()
		} else {
			_, err = n.ingest(ctx)
		}
		if err != nil {
			return err
		}
	}
	t := now()
	if a.Size != nil {
		if n.kind != manifest.KindFile {
			if n.isDir() {
				return syscall.EISDIR
			}
			return syscall.EINVAL
		}
		if _, err := n.ingest(ctx); err != nil {
			return err
		}
		if err := n.truncate(ctx, *a.Size); err != nil {
			return err
		}
		if err := n.writeThrough(ctx, *a.Size, *a.Size, true); err != nil {
			return err
		}
		n.mtime = t
	}
	a.Drop.apply(n)
	if a.Mode != nil {
		n.mode = *a.Mode & 0o7777
		n.chmodACL()
	}
	if (a.UID != nil || a.GID != nil) && !n.isDir() && a.Mode == nil {
		// chown drops them for every caller, root too, but a privileged
		// one keeps a setgid that is not group-executable.
		n.killPriv(a.Chowner.inGroup(n.gid))
	}
	if a.UID != nil {
		n.uid = *a.UID
	}
	if a.GID != nil {
		n.gid = *a.GID
	}
	switch {
	case a.AtimeNow:
		n.atime = t
	case a.Atime != nil:
		n.atime = *a.Atime
	}
	switch {
	case a.MtimeNow:
		n.mtime = t
	case a.Mtime != nil:
		n.mtime = *a.Mtime
	}
	n.ctime = t
	ch.setattr(n, id, a.Size)
	return s.spillAfterChange(ctx, n, -1)
}

// spillAfterChange is maybeSpill after a change that was applied: a spill
// that needs a base only a remote has (under cas.LocalOnly) is left to
// spillLater, which fetches first, since failing now would have the change
// made again (localFirst, the ring's EAGAIN). Called with n.mu held.
func (s *Session) spillAfterChange(ctx context.Context, n *node, keep int) error {
	err := s.maybeSpill(ctx, n, keep)
	if errors.Is(err, cas.ErrNotLocal) {
		s.spillLater()
		return nil
	}
	return err
}

// maybeSpill bounds the memory a file's buffered writes take: past
// spillThreshold of whole buffers they go to the store; overlays, which
// hold only what was written (and would have to read their base to be
// stored), stay until overlaySpillThreshold. Called with n.mu held.
func (s *Session) maybeSpill(ctx context.Context, n *node, keep int) error {
	if n.data == nil {
		return nil
	}
	overlays := n.data.overlayBytes >= overlaySpillThreshold
	if !overlays && n.data.dirtyBytes < spillThreshold {
		return nil
	}
	b := s.newBatch()
	defer b.Discard()
	if err := n.spill(ctx, b, keep, overlays); err != nil {
		return err
	}
	return b.Commit(ctx, false)
}

// spillAll bounds the write buffers: a session's, past
// sessionSpillThreshold, go to the store once the engine's together are
// past their budget (buffers): in a goroutine, so that the request that
// crossed the line (served on a ring thread, which its CPU's other
// requests wait for) does not store them; past twice the budget the
// caller stores them itself, which holds back a writer that outruns the
// store. Called with freeze held shared and no node lock.
func (s *Session) spillAll(ctx context.Context) error {
	if s.dirtyBytes.Load() < sessionSpillThreshold {
		return nil
	}
	switch all := s.buffers.total.Load(); {
	case all < s.buffers.budget:
		return nil
	case all < 2*s.buffers.budget:
		s.spillLater()
		return nil
	}
	return s.spillBuffers(ctx)
}

// spillLater starts a goroutine that spills the session's write buffers,
// unless one runs already or the session is closed.
// One runs at a time: s.spilling is set from before it starts until it
// ends, and is set back at once if it does not start.
func (s *Session) spillLater() {
	if !s.spilling.CompareAndSwap(false, true) {
		return
	}
	started := s.workers.start(func() {
		err := s.fetchBases(context.Background())
		if err == nil {
			err = s.spillInSteps(context.Background())
		}
		s.spilling.Store(false)
		if err != nil {
			// The buffers stay; the next flush stores them or reports it.
			s.log.Warn("spill write buffers", "session", s.name, "err", err)
		}
	})
	if !started {
		s.spilling.Store(false)
	}
}

// preflush does what it can of a flush's work with writers still running
// (the freeze lock held shared): it fetches the overlays' bases with no
// lock held (fetchBases), absorbs the staged files the flush
// would absorb (all of them for a capture) and stores every file's write
// buffers, so that the flush that follows holds writers back only for
// what changed meanwhile. Errors are left for the flush to meet.
func (s *Session) preflush(ctx context.Context, all bool) {
	if s.readOnly {
		return
	}
	_ = s.fetchBases(ctx)
	s.freeze.RLock()
	for _, n := range s.backed.list() {
		named := s.hasName(n)
		n.mu.Lock()
		if b := n.data.backing; b != nil && b.isStaged() && b.absorbDue(all, named) {
			_, _ = n.absorb(ctx)
		}
		n.mu.Unlock()
	}
	s.freeze.RUnlock()
	if s.dirtyBytes.Load() > 0 {
		_ = s.spillInSteps(ctx)
	}
}

// spillBuffers moves every changed file's write buffers into the store.
// Called with freeze held shared and no node lock.
func (s *Session) spillBuffers(ctx context.Context) error {
	_, err := s.spillSome(ctx, s.dirtyFiles(), math.MaxInt64)
	return err
}

// spillStep bounds what a step of spillInSteps stores.
const spillStep = 8 << 20

// spillInSteps is spillBuffers for a caller that holds no lock: it holds
// freeze shared only for a step of about spillStep bytes at a time, each
// committed before it lets go (a flush must not record a chunk the store
// lacks), so that a flush waits for one step at most, and with it the
// writers queued behind the flush, however much the buffers hold.
func (s *Session) spillInSteps(ctx context.Context) error {
	files := s.dirtyFiles()
	for len(files) > 0 {
		s.freeze.RLock()
		var err error
		files, err = s.spillSome(ctx, files, spillStep)
		s.freeze.RUnlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// dirtyFiles lists the files changed since the last flush.
func (s *Session) dirtyFiles() []*node {
	s.dirtyMu.Lock()
	defer s.dirtyMu.Unlock()
	files := make([]*node, 0, len(s.dirty))
	for n := range s.dirty {
		if n.kind == manifest.KindFile {
			files = append(files, n)
		}
	}
	return files
}

// spillSome spills the buffers of the first of files, until about limit
// bytes, in one batch, and returns the files left. Called with freeze
// held shared and no node lock.
func (s *Session) spillSome(ctx context.Context, files []*node, limit int64) ([]*node, error) {
	b := s.newBatch()
	defer b.Discard()
	var size int64
	k := 0
	for ; k < len(files) && size < limit; k++ {
		n := files[k]
		n.mu.Lock()
		size += n.data.dirtyBytes + n.data.overlayBytes
		err := n.spill(ctx, b, -1, true)
		n.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
	return files[k:], b.Commit(ctx, false)
}

// WriteOp says how a write lands: at the end (O_APPEND), and whether it
// drops the file's privileges (an unprivileged writer; see privDrop).
type WriteOp struct {
	Append bool
	Drop   privDrop
}

// Write writes data at off (at the end with op.Append) and returns the
// number of bytes written. A write that reads a stored chunk only a
// remote has fetches it first, with no lock held (localFirst).
func (s *Session) Write(ctx context.Context, n *node, data []byte, off int64, op WriteOp) (int, error) {
	var k int
	var full bool
	from, to := off, off+int64(len(data))
	if op.Append {
		from, to = appendSpan, appendSpan
	}
	write := func(ctx context.Context) (err error) {
		k, full, err = s.writeHeld(ctx, n, data, off, op)
		return err
	}
	err := s.localFirst(ctx, n, from, to, write)
	if errors.Is(err, cas.ErrNoSpace) && s.flushNow != nil && s.journal.holds() {
		// The journal's copies of buffered writes take room on the disk
		// too, until a flush stores the buffers and empties it: flush, and
		// try once more.
		if s.flushNow(ctx) == nil {
			err = s.localFirst(ctx, n, from, to, write)
		}
	}
	if err != nil {
		return 0, err
	}
	if full && s.flushNow != nil {
		// The journal could not take the write: it is acknowledged only
		// once a flush holds it (and empties the journal).
		if err := s.flushNow(ctx); err != nil {
			return 0, err
		}
	}
	return k, nil
}

// writeHeld is write with a flush held off, and the buffers bounded after
// it.
func (s *Session) writeHeld(ctx context.Context, n *node, data []byte, off int64, op WriteOp) (int, bool, error) {
	done, err := s.begin()
	if err != nil {
		return 0, false, err
	}
	defer done()
	if err := s.roomFor(int64(len(data))); err != nil {
		return 0, false, err
	}
	k, full, err := s.write(ctx, n, data, off, op, s.writeID(n))
	if err != nil {
		return 0, false, err
	}
	if err := s.spillAll(ctx); errors.Is(err, cas.ErrNotLocal) {
		// Overlays whose base only a remote has: a goroutine stores
		// them, fetching their bases; the write took place.
		s.spillLater()
	} else if err != nil {
		return 0, false, err
	}
	return k, full, nil
}

// roomFor refuses a write of n bytes into the write buffers with ENOSPC
// unless the store could take them together with every byte the engine's
// buffers hold: a buffered write is acknowledged before it is stored, and
// must never meet a full store later, at a flush or an unmount. This is
// what ext4 does for delayed allocation, which reserves blocks at
// write(2). Storing buffered bytes later may use part of the store's
// reserve (newBatch).
func (s *Session) roomFor(n int64) error {
	m, ok := s.store.(cas.SpaceMeter)
	if !ok {
		return nil
	}
	head, ok := m.Headroom()
	if !ok {
		return nil
	}
	if held := s.buffers.total.Load(); held+n > head {
		if !s.noRoom.Swap(true) {
			s.log.Warn("store disk is full: refusing writes", "session", s.name, "buffered_mib", held>>20, "room_mib", head>>20)
		}
		return fmt.Errorf("%d MiB of writes wait to be stored, %d MiB of room left: %w", held>>20, head>>20, cas.ErrNoSpace)
	}
	if s.noRoom.Load() && s.noRoom.Swap(false) {
		s.log.Warn("store disk has room again: accepting writes", "session", s.name)
	}
	return nil
}

// write applies a write to n and journals it under id (logWrite); full
// reports that the journal could not take it. Under cas.LocalOnly, a
// write that would read a stored chunk only a remote has fails with
// cas.ErrNotLocal before it changes n (writeReady), and a spill of
// overlays that would is left for later: the write took place.
func (s *Session) write(ctx context.Context, n *node, data []byte, off int64, op WriteOp, id uint64) (k int, full bool, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kind != manifest.KindFile {
		return 0, false, syscall.EISDIR
	}
	if _, err := n.ingest(ctx); err != nil {
		return 0, false, err
	}
	if op.Append {
		off = n.data.size
	}
	if cas.IsLocalOnly(ctx) && off >= 0 {
		if err := n.writeReady(ctx, off, len(data)); err != nil {
			return 0, false, err
		}
	}
	if err := n.writeAt(ctx, data, off); err != nil {
		return 0, false, err
	}
	if err := n.writeThrough(ctx, off, off+int64(len(data)), false); err != nil {
		return 0, false, err
	}
	t := now()
	n.mtime, n.ctime = t, t
	dropped := op.Drop.apply(n) // a change of attributes, not only of content
	logged, full := s.logWrite(n, id, data, off, dropped)
	if !logged {
		s.markWritten(n, off, off+int64(len(data)))
		if dropped {
			s.markDirty(n)
		}
	}
	last := int((off + int64(len(data)) - 1) / manifest.ChunkSize)
	if err := s.spillAfterChange(ctx, n, last); err != nil {
		return 0, false, err
	}
	return len(data), full, nil
}

// Read reads at off into dest. A chunk that only a remote has is fetched
// with no lock held and the read tried again, so that a slow remote holds
// up no other operation on n (a stat, a listing of its directory); under
// cas.LocalOnly it is an error wrapping cas.ErrNotLocal instead. Each try
// fetches one chunk, so a read of k chunks tries at most k+2 times; past
// that (the chunks fetched keep leaving the cache) it fetches with n.mu
// held.
func (s *Session) Read(ctx context.Context, n *node, dest []byte, off int64) (int, error) {
	if _, err := s.ingestNode(ctx, n); err != nil {
		return 0, err
	}
	if cas.IsLocalOnly(ctx) {
		return n.read(ctx, dest, off)
	}
	local := cas.LocalOnly(ctx)
	for range len(dest)/manifest.ChunkSize + 3 {
		k, err := n.read(local, dest, off)
		var miss *remoteChunk
		if !errors.As(err, &miss) {
			if errors.Is(err, cas.ErrNotLocal) {
				break // not a chunk (a chunk list): read with the remote allowed
			}
			return k, err
		}
		if err := s.chunks.warm(ctx, miss.ref); err != nil {
			return 0, err
		}
	}
	return n.read(ctx, dest, off)
}

// read reads at off into dest with n.mu held.
func (n *node) read(ctx context.Context, dest []byte, off int64) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kind != manifest.KindFile {
		return 0, syscall.EISDIR
	}
	if off < 0 {
		return 0, syscall.EINVAL
	}
	return n.readAt(ctx, dest, off)
}

// Fallocate modes, as in fallocate(2).
const (
	fallocKeepSize  = 0x1
	fallocPunchHole = 0x2
	fallocZeroRange = 0x10
)

// Allocate implements fallocate: plain allocation extends the size (the
// bytes read as zero); PUNCH_HOLE and ZERO_RANGE zero a range. drop is
// the caller's, as for a write: ext4 drops privileges on fallocate too (and
// the kernel sends no flag for it with FALLOCATE).
func (s *Session) Allocate(ctx context.Context, n *node, off, length int64, mode uint32, drop privDrop) error {
	if mode&^fallocKeepSize == 0 {
		return s.allocate(ctx, n, off, length, mode, drop)
	}
	// Zeroing part of a stored chunk keeps the rest: the chunks are
	// fetched with no lock held (localFirst).
	return s.localFirst(ctx, n, off, off+length, func(ctx context.Context) error {
		return s.allocate(ctx, n, off, length, mode, drop)
	})
}

// allocate is Allocate, tried once; under cas.LocalOnly one that needs a
// stored chunk only a remote has fails before it changes n.
func (s *Session) allocate(ctx context.Context, n *node, off, length int64, mode uint32, drop privDrop) error {
	done, err := s.begin()
	if err != nil {
		return err
	}
	defer done()
	if off < 0 || length <= 0 {
		return syscall.EINVAL
	}
	ch, id := s.nodeChange(n)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kind != manifest.KindFile {
		return syscall.ENODEV
	}
	if _, err := n.ingest(ctx); err != nil {
		return err
	}
	switch mode &^ fallocKeepSize {
	case 0:
	case fallocPunchHole:
		if mode&fallocKeepSize == 0 {
			return syscall.EOPNOTSUPP
		}
		if err := n.punchHole(ctx, off, length); err != nil {
			return err
		}
	case fallocZeroRange:
		if err := n.punchHole(ctx, off, length); err != nil {
			return err
		}
	default:
		return syscall.EOPNOTSUPP
	}
	end := off + length
	if end > maxFileSize {
		// With KEEP_SIZE too: the journal's record of the range would
		// be past any file's size, which a replay takes for damage.
		return syscall.EFBIG
	}
	if mode&fallocKeepSize == 0 && end > n.data.size {
		if err := n.growTo(ctx, end); err != nil {
			return err
		}
	}
	if err := n.writeThrough(ctx, off, off+length, false); err != nil {
		return err
	}
	t := now()
	n.ctime = t
	if mode != 0 {
		n.mtime = t
	}
	drop.apply(n)
	ch.add(journalRecord{kind: recAlloc, id: id, off: off, size: length, flags: mode})
	ch.ok = ch.ok && id != 0
	ch.held(n, id)
	ch.commit()
	return nil
}

// Xattr errors and flags as in setxattr(2), and xattrKillSGID, the
// kernel's FUSE_SETXATTR_ACL_KILL_SGID, which the gate folds in (nointr.go).
const (
	xattrCreate   = 0x1
	xattrReplace  = 0x2
	xattrKillSGID = 1 << 31
)

// xattrNamespaces are the namespaces ext4 stores (system.* aside: of it,
// only the ACLs, acl.go): the kernel checks trusted.* (CAP_SYS_ADMIN) and
// user.* (regular files and directories only) before it sends a request.
var xattrNamespaces = []string{"user.", "trusted.", "security."}

// checkXattrName answers for name as ext4 does: ERANGE for an empty or too
// long name, EINVAL for a namespace with nothing after it, EOPNOTSUPP for
// a namespace ext4 does not have, on get and remove as on set.
func checkXattrName(name string) error {
	if name == "" || len(name) > 255 {
		return syscall.ERANGE
	}
	if isACLXattr(name) {
		return nil
	}
	for _, ns := range xattrNamespaces {
		if strings.HasPrefix(name, ns) {
			if len(name) == len(ns) {
				return syscall.EINVAL
			}
			return nil
		}
	}
	return syscall.EOPNOTSUPP
}

// GetXattr returns the value of name.
func (s *Session) GetXattr(n *node, name string) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	v, ok := n.xattrs[name]
	if !ok {
		return nil, syscall.ENODATA
	}
	return v, nil
}

// SetXattr sets name to value.
func (s *Session) SetXattr(n *node, name string, value []byte, flags uint32) error {
	done, err := s.begin()
	if err != nil {
		return err
	}
	defer done()
	if err := checkXattrName(name); err != nil {
		return err
	}
	if len(value) > 64<<10 {
		return syscall.E2BIG
	}
	ch, id := s.nodeChange(n)
	n.mu.Lock()
	defer n.mu.Unlock()
	if isACLXattr(name) {
		if err := s.setACLXattr(n, name, value, flags); err != nil {
			return err
		}
		ch.held(n, id)
		ch.commit()
		return nil
	}
	_, exists := n.xattrs[name]
	if flags&xattrCreate != 0 && exists {
		return syscall.EEXIST
	}
	if flags&xattrReplace != 0 && !exists {
		return syscall.ENODATA
	}
	if n.xattrs == nil {
		n.xattrs = make(map[string][]byte)
	}
	n.xattrs[name] = append([]byte(nil), value...)
	n.ctime = now()
	ch.held(n, id)
	ch.commit()
	return nil
}

// RemoveXattr deletes name.
func (s *Session) RemoveXattr(n *node, name string) error {
	done, err := s.begin()
	if err != nil {
		return err
	}
	defer done()
	if err := checkXattrName(name); err != nil {
		return err
	}
	ch, id := s.nodeChange(n)
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.xattrs[name]; !ok {
		if isACLXattr(name) {
			return nil // no ACL to remove: done, as on ext4
		}
		return syscall.ENODATA
	}
	delete(n.xattrs, name)
	n.ctime = now()
	ch.held(n, id)
	ch.commit()
	return nil
}

// ListXattr returns the attribute names, sorted; trusted.* only to a
// privileged caller, as ext4 lists them.
func (s *Session) ListXattr(n *node, privileged bool) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, 0, len(n.xattrs))
	for k := range n.xattrs {
		if !privileged && strings.HasPrefix(k, "trusted.") {
			continue
		}
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// Attr is a node's attributes as the kernel sees them.
type Attr struct {
	Ino                 uint64
	Kind                manifest.Kind
	Mode                uint32
	UID, GID            uint32
	Size                int64
	Blocks              int64 // st_blocks: 512-byte units allocated (sparse.go)
	Nlink               uint32
	Rdev                uint32 // device nodes
	Atime, Mtime, Ctime int64
	Btime               int64 // 0 when unknown
}

// Getattr returns n's attributes, a backed file's st_blocks from its
// backing file.
func (s *Session) Getattr(ctx context.Context, n *node) (Attr, error) {
	if err := s.observeBacked(ctx, n); err != nil {
		return Attr{}, err
	}
	blocks, backed := n.backedBlocks() // and its passthrough reads: before attrs
	a, err := s.attrs(ctx, n)
	if err != nil {
		return Attr{}, err
	}
	if backed {
		a.Blocks = blocks
	}
	return a, nil
}

// observeBacked takes in what passthrough writers wrote to n's backing
// file, if it has one (its size and times; an appender's bytes), so that
// what follows sees it and is dated after it.
func (s *Session) observeBacked(ctx context.Context, n *node) error {
	staged, err := s.observeStaged(n)
	if err == nil && staged < 0 {
		_, err = s.ingestNode(ctx, n)
	}
	return err
}

// attrs returns n's attributes as the session holds them, without
// looking at a backing file first: Getattr does, and Setattr just did (a
// second fstat of the staging file cost a chmod, chown or utimens of a
// new file another system call, three per file of an untar). A backed
// file's st_blocks is then its size's, which never understates it.
func (s *Session) attrs(ctx context.Context, n *node) (Attr, error) {
	var nlink uint32 = 1
	if n.isDir() {
		k, err := s.subdirCount(ctx, n)
		if err != nil {
			return Attr{}, err
		}
		nlink = uint32(2 + k)
	} else {
		s.treeMu.Lock()
		nlink = n.nlink
		s.treeMu.Unlock()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	a := Attr{Ino: n.ino, Kind: n.kind, Mode: n.mode, UID: n.uid, GID: n.gid, Nlink: nlink, Rdev: n.rdev, Atime: n.atime, Mtime: n.mtime, Ctime: n.ctime, Btime: n.btime}
	switch n.kind {
	case manifest.KindFile:
		a.Size = n.data.size
		if b := n.data.backing; b != nil && b.isStaged() {
			a.Size = b.stage.size
		}
	case manifest.KindSymlink:
		a.Size = int64(len(n.target))
	case manifest.KindDir:
		a.Size = 4096
	}
	a.Blocks = n.blocks(ctx, a.Size)
	return a, nil
}

// observeStaged observes n's staging file if n has one and returns its
// size, or -1 when n is not staged.
func (s *Session) observeStaged(n *node) (int64, error) {
	if n.kind != manifest.KindFile || s.readOnly {
		return -1, nil
	}
	n.mu.Lock()
	staged := n.data.backing != nil && n.data.backing.isStaged()
	n.mu.Unlock()
	if !staged {
		return -1, nil // without the freeze lock: a flush does not hold up stat
	}
	s.freeze.RLock()
	defer s.freeze.RUnlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	if b := n.data.backing; b == nil || !b.isStaged() {
		return -1, nil
	}
	return n.observe()
}

// Readlink returns a symlink's stored target.
func (s *Session) Readlink(n *node) (string, error) {
	if n.kind != manifest.KindSymlink {
		return "", syscall.EINVAL
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.target, nil
}

// CopyRange copies length bytes from src at offIn to dst at offOut, chunk
// by chunk, and returns the bytes copied.
func (s *Session) CopyRange(ctx context.Context, src *node, offIn int64, dst *node, offOut int64, length int64, drop privDrop) (int64, error) {
	if src.kind != manifest.KindFile || dst.kind != manifest.KindFile {
		return 0, syscall.EINVAL
	}
	buf := make([]byte, min(length, 1<<20))
	var copied int64
	for copied < length {
		want := min(int64(len(buf)), length-copied)
		n, err := s.Read(ctx, src, buf[:want], offIn+copied)
		if err != nil {
			return copied, err
		}
		if n == 0 {
			break
		}
		if _, err := s.Write(ctx, dst, buf[:n], offOut+copied, WriteOp{Drop: drop}); err != nil {
			return copied, err
		}
		copied += int64(n)
	}
	return copied, nil
}
