package fusefs

import (
	"context"
	"encoding/binary"
	"fmt"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// POSIX ACLs are stored as the xattrs the kernel reads them from, in its
// format (include/uapi/linux/posix_acl_xattr.h): a version-2 header and
// {tag, perm, id} entries. The kernel enforces them (FUSE_POSIX_ACL): it
// caches what GETXATTR returns and checks access itself. What it leaves
// to the daemon is what ext4 does in its set_acl and create paths, done
// here as the kernel's posix_acl helpers do it: an access ACL equivalent
// to the mode is the mode, not an xattr; a stored one follows chmod; a new
// node inherits its directory's default ACL, masked by the create mode,
// and only a node without one has the umask applied.

// The ACL xattrs, the only system.* names a node has.
const (
	aclAccessXattr  = "system.posix_acl_access"
	aclDefaultXattr = "system.posix_acl_default"
)

// ACL entry tags and the id of an entry that names no one.
const (
	aclUserObj     = 0x01
	aclUser        = 0x02
	aclGroupObj    = 0x04
	aclGroup       = 0x08
	aclMask        = 0x10
	aclOther       = 0x20
	aclUndefinedID = 0xffffffff
	aclVersion     = 2
	aclHeaderSize  = 4
	aclEntrySize   = 8
)

// aclEntry is one entry: id is a uid (aclUser) or gid (aclGroup), else
// aclUndefinedID; perm is rwx in the low three bits.
type aclEntry struct {
	tag, perm uint16
	id        uint32
}

// posixACL is a valid ACL, its entries in the kernel's order (by tag).
type posixACL []aclEntry

// isACLXattr reports whether name is one of the ACL xattrs.
func isACLXattr(name string) bool {
	return name == aclAccessXattr || name == aclDefaultXattr
}

// decodeACL decodes an ACL xattr value as the kernel's
// posix_acl_from_xattr and posix_acl_valid do: EOPNOTSUPP for another
// version, EINVAL for a torn or invalid one. A header alone is no ACL
// (nil), which removes it.
func decodeACL(b []byte) (posixACL, error) {
	if len(b) < aclHeaderSize || (len(b)-aclHeaderSize)%aclEntrySize != 0 {
		return nil, syscall.EINVAL
	}
	if binary.LittleEndian.Uint32(b) != aclVersion {
		return nil, syscall.EOPNOTSUPP
	}
	n := (len(b) - aclHeaderSize) / aclEntrySize
	if n == 0 {
		return nil, nil
	}
	a := make(posixACL, n)
	for i := range a {
		e := b[aclHeaderSize+i*aclEntrySize:]
		a[i] = aclEntry{tag: binary.LittleEndian.Uint16(e), perm: binary.LittleEndian.Uint16(e[2:]), id: binary.LittleEndian.Uint32(e[4:])}
		if a[i].tag != aclUser && a[i].tag != aclGroup {
			// The kernel ignores the id of an entry that names no one.
			a[i].id = aclUndefinedID
		}
	}
	if err := a.valid(); err != nil {
		return nil, err
	}
	return a, nil
}

// valid checks the kernel's rules (posix_acl_valid): one owner, owning
// group and other entry, named users after the owner, named groups after
// the owning group, a mask after them if any is named, nothing else.
func (a posixACL) valid() error {
	state := aclUserObj
	named := false
	for _, e := range a {
		if e.perm&^7 != 0 {
			return syscall.EINVAL
		}
		var ok bool
		state, ok = aclNext(state, e, &named)
		if !ok {
			return syscall.EINVAL
		}
	}
	if state != 0 {
		return syscall.EINVAL
	}
	return nil
}

// aclNext is valid's step from state over e: the next state, and whether
// e may come in state. named records a named user or group.
func aclNext(state int, e aclEntry, named *bool) (int, bool) {
	switch e.tag {
	case aclUserObj:
		return aclUser, state == aclUserObj
	case aclUser, aclGroup:
		*named = true
		want := aclUser
		if e.tag == aclGroup {
			want = aclGroup
		}
		return state, state == want && e.id != aclUndefinedID
	case aclGroupObj:
		return aclGroup, state == aclUser
	case aclMask:
		return aclOther, state == aclGroup
	case aclOther:
		return 0, state == aclOther || state == aclGroup && !*named
	}
	return state, false
}

// encode returns a's xattr value.
func (a posixACL) encode() []byte {
	b := make([]byte, aclHeaderSize, aclHeaderSize+len(a)*aclEntrySize)
	binary.LittleEndian.PutUint32(b, aclVersion)
	for _, e := range a {
		b = binary.LittleEndian.AppendUint16(b, e.tag)
		b = binary.LittleEndian.AppendUint16(b, e.perm)
		b = binary.LittleEndian.AppendUint32(b, e.id)
	}
	return b
}

// equivMode returns the permission bits a stands for, and whether a says
// no more than they do (posix_acl_equiv_mode): the group bits are the
// mask's when a has one.
func (a posixACL) equivMode() (perm uint32, equiv bool) {
	equiv = true
	for _, e := range a {
		p := uint32(e.perm & 7)
		switch e.tag {
		case aclUserObj:
			perm |= p << 6
		case aclGroupObj:
			perm |= p << 3
		case aclOther:
			perm |= p
		case aclMask:
			perm = perm&^0o070 | p<<3
			equiv = false
		default:
			equiv = false
		}
	}
	return perm, equiv
}

// chmod sets the entries that mirror the mode from mode's permission
// bits (posix_acl_chmod): the owner, the mask (else the owning group) and
// other.
func (a posixACL) chmod(mode uint32) {
	var group *aclEntry
	for i := range a {
		switch a[i].tag {
		case aclUserObj:
			a[i].perm = uint16(mode>>6) & 7
		case aclGroupObj:
			if group == nil {
				group = &a[i]
			}
		case aclMask:
			group = &a[i]
		case aclOther:
			a[i].perm = uint16(mode) & 7
		}
	}
	if group != nil {
		group.perm = uint16(mode>>3) & 7
	}
}

// createMasked masks a, a directory's default ACL copied for a new node,
// by the create mode, and returns the mode masked by a in turn
// (posix_acl_create_masked), and whether a says more than that mode.
func (a posixACL) createMasked(mode uint32) (uint32, bool) {
	var group, mask *aclEntry
	equiv := true
	for i := range a {
		e := &a[i]
		switch e.tag {
		case aclUserObj:
			e.perm &= uint16(mode>>6) & 7
			mode &= uint32(e.perm)<<6 | ^uint32(0o700)
		case aclGroupObj:
			group = e
		case aclMask:
			mask = e
			equiv = false
		case aclOther:
			e.perm &= uint16(mode) & 7
			mode &= uint32(e.perm) | ^uint32(0o007)
		default:
			equiv = false
		}
	}
	if mask != nil {
		group = mask
	}
	if group != nil {
		group.perm &= uint16(mode>>3) & 7
		mode &= uint32(group.perm)<<3 | ^uint32(0o070)
	}
	return mode, !equiv
}

// setACL sets ACL xattr name of n to value (a header alone removes it),
// as ext4 does; setxattr's create and replace flags do not apply, as they
// do not to ext4's ACLs. killSGID is the kernel's word that the caller is
// outside n's group and lacks CAP_FSETID, which drops the setgid bit a
// new access ACL would otherwise keep (posix_acl_update_mode). Called
// with n.mu held.
func (n *node) setACL(name string, value []byte, killSGID bool) error {
	a, err := decodeACL(value)
	if err != nil {
		return err
	}
	if name == aclDefaultXattr {
		if !n.isDir() {
			if a == nil {
				return nil
			}
			return syscall.EACCES
		}
		n.putXattr(name, a)
		return nil
	}
	if a != nil {
		perm, equiv := a.equivMode()
		n.mode = n.mode&^0o777 | perm
		if equiv {
			a = nil
		}
		if killSGID {
			n.mode &^= syscall.S_ISGID
		}
	}
	n.putXattr(name, a)
	return nil
}

// setACLXattr is SetXattr for an ACL name; the caller records the
// change. Called with n.mu held.
func (s *Session) setACLXattr(n *node, name string, value []byte, flags uint32) error {
	if err := n.setACL(name, value, flags&xattrKillSGID != 0); err != nil {
		return err
	}
	n.ctime = now()
	return nil
}

// putXattr stores a as xattr name of n, or removes it for nil. Called
// with n.mu held.
func (n *node) putXattr(name string, a posixACL) {
	if a == nil {
		delete(n.xattrs, name)
		return
	}
	if n.xattrs == nil {
		n.xattrs = make(map[string][]byte)
	}
	n.xattrs[name] = a.encode()
}

// chmodACL makes n's access ACL, if it has one, follow n's mode after a
// chmod. One that does not decode (only an imported tree can hold one)
// stays as it is: the kernel refuses access by it. Called with n.mu held.
func (n *node) chmodACL() {
	v, ok := n.xattrs[aclAccessXattr]
	if !ok {
		return
	}
	if a, err := storedACL(v); err == nil {
		a.chmod(n.mode)
		n.xattrs[aclAccessXattr] = a.encode()
	}
}

// inheritACL gives n, new in a directory whose default ACL is def (nil
// for none), its ACLs and final mode, as the kernel's posix_acl_create
// and ext4 do: with a default ACL, n's access ACL is it masked by the
// create mode and a new directory keeps it as its own default; without
// one, the creator's umask applies. A symlink has neither. Called before
// n is reachable.
func (n *node) inheritACL(def []byte, umask uint32) error {
	if n.kind == manifest.KindSymlink {
		return nil
	}
	if def == nil {
		n.mode &^= umask & 0o777
		return nil
	}
	a, err := storedACL(def)
	if err != nil {
		return err
	}
	if n.isDir() {
		n.putXattr(aclDefaultXattr, a)
	}
	access := append(posixACL(nil), a...)
	perm, more := access.createMasked(n.mode & 0o777)
	n.mode = n.mode&^0o777 | perm&0o777
	if more {
		n.putXattr(aclAccessXattr, access)
	}
	return nil
}

// storedACL decodes an ACL a node holds; one that does not decode came in
// from outside the mount (an imported tree) and is corrupt.
func storedACL(v []byte) (posixACL, error) {
	a, err := decodeACL(v)
	if err != nil || a == nil {
		return nil, fmt.Errorf("stored POSIX ACL: %w", cas.ErrCorrupt)
	}
	return a, nil
}

// The kernel leaves the umask to a file system with ACLs (FUSE_DONT_MASK:
// the request has the mode as asked, and the umask beside it), and
// go-fuse's node API passes the mode alone; so the gate folds the umask
// into the mode's bits above the file type, and the node unfolds it.
const (
	umaskFolded = 1 << 31
	umaskShift  = 16
)

// foldUmask returns mode with umask folded in.
func foldUmask(mode, umask uint32) uint32 {
	return mode&0o177777 | (umask&0o777)<<umaskShift | umaskFolded
}

// unfoldUmask returns the mode and umask folded into mode; a mode with
// none folded in has none.
func unfoldUmask(mode uint32) (uint32, uint32) {
	if mode&umaskFolded == 0 {
		return mode, 0
	}
	return mode & 0o177777, mode >> umaskShift & 0o777
}

// creator returns the mode a create request asks for and its caller, with
// the umask the gate folded into mode.
func creator(ctx context.Context, mode uint32) (uint32, Owner) {
	mode, umask := unfoldUmask(mode)
	who := caller(ctx)
	who.Umask = umask
	return mode, who
}

// killSGID reports whether the kernel asks, with a SETXATTR of an ACL, to
// drop the setgid bit (FUSE_SETXATTR_ACL_KILL_SGID). Its request has the
// field only when FUSE_SETXATTR_EXT was agreed on.
func (g *rawGate) killSGID(in *fuse.SetXAttrIn) bool {
	s := g.server.Load()
	return s != nil && s.KernelSettings().Flags64()&fuse.CAP_SETXATTR_EXT != 0 &&
		in.SetXAttrFlags&fuse.SETXATTR_ACL_KILL_SGID != 0
}
