package fusefs

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/archive"
)

// acl builds an ACL from {tag, perm, id} triples.
func acl(es ...aclEntry) posixACL { return posixACL(es) }

func uo(p uint16) aclEntry            { return aclEntry{aclUserObj, p, aclUndefinedID} }
func un(id uint32, p uint16) aclEntry { return aclEntry{aclUser, p, id} }
func gobj(p uint16) aclEntry          { return aclEntry{aclGroupObj, p, aclUndefinedID} }
func gn(id uint32, p uint16) aclEntry { return aclEntry{aclGroup, p, id} }
func mk(p uint16) aclEntry            { return aclEntry{aclMask, p, aclUndefinedID} }
func ot(p uint16) aclEntry            { return aclEntry{aclOther, p, aclUndefinedID} }

func TestDecodeACL(t *testing.T) {
	minimal := acl(uo(6), gobj(4), ot(4))
	named := acl(uo(7), un(1000, 6), un(7, 4), gobj(5), gn(100, 7), mk(7), ot(0))
	withID := minimal.encode()
	withID[8] = 9 // an id on the owner entry, which the kernel ignores
	for _, tc := range []struct {
		name string
		in   []byte
		want posixACL
		err  error
	}{
		{"minimal", minimal.encode(), minimal, nil},
		{"named", named.encode(), named, nil},
		{"id ignored", withID, minimal, nil},
		{"header only", posixACL(nil).encode(), nil, nil},
		{"empty", nil, nil, syscall.EINVAL},
		{"torn header", []byte{2, 0}, nil, syscall.EINVAL},
		{"torn entry", append(minimal.encode(), 1), nil, syscall.EINVAL},
		{"version 1", append([]byte{1, 0, 0, 0}, minimal.encode()[4:]...), nil, syscall.EOPNOTSUPP},
		{"no owner", acl(gobj(4), ot(4)).encode(), nil, syscall.EINVAL},
		{"no other", acl(uo(6), gobj(4)).encode(), nil, syscall.EINVAL},
		{"no group", acl(uo(6), ot(4)).encode(), nil, syscall.EINVAL},
		{"named without mask", acl(uo(6), un(1, 4), gobj(4), ot(4)).encode(), nil, syscall.EINVAL},
		{"group without mask", acl(uo(6), gobj(4), gn(1, 4), ot(4)).encode(), nil, syscall.EINVAL},
		{"mask alone", acl(uo(6), gobj(4), mk(4), ot(4)).encode(), acl(uo(6), gobj(4), mk(4), ot(4)), nil},
		{"two owners", acl(uo(6), uo(6), gobj(4), ot(4)).encode(), nil, syscall.EINVAL},
		{"two others", acl(uo(6), gobj(4), ot(4), ot(4)).encode(), nil, syscall.EINVAL},
		{"two masks", acl(uo(6), gobj(4), mk(4), mk(4), ot(4)).encode(), nil, syscall.EINVAL},
		{"out of order", acl(uo(6), gobj(4), un(1, 4), mk(4), ot(4)).encode(), nil, syscall.EINVAL},
		{"perm too big", acl(uo(8), gobj(4), ot(4)).encode(), nil, syscall.EINVAL},
		{"unknown tag", acl(uo(6), gobj(4), aclEntry{0x40, 4, aclUndefinedID}, ot(4)).encode(), nil, syscall.EINVAL},
		{"named user without id", acl(uo(6), un(aclUndefinedID, 4), gobj(4), mk(4), ot(4)).encode(), nil, syscall.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeACL(tc.in)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestACLModes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		a     posixACL
		perm  uint32
		equiv bool
	}{
		{"minimal", acl(uo(7), gobj(5), ot(1)), 0o751, true},
		{"mask is the group bits", acl(uo(6), un(7, 7), gobj(4), mk(2), ot(0)), 0o620, false},
		{"mask alone", acl(uo(6), gobj(4), mk(6), ot(4)), 0o664, false},
	} {
		perm, equiv := tc.a.equivMode()
		require.Equal(t, tc.perm, perm, tc.name)
		require.Equal(t, tc.equiv, equiv, tc.name)
	}

	a := acl(uo(7), un(7, 7), gobj(7), mk(7), ot(7))
	a.chmod(0o640)
	require.Equal(t, acl(uo(6), un(7, 7), gobj(7), mk(4), ot(0)), a, "chmod sets the mask, not the group")
	a = acl(uo(7), gobj(7), ot(7))
	a.chmod(0o751)
	require.Equal(t, acl(uo(7), gobj(5), ot(1)), a)
}

func TestACLCreateMasked(t *testing.T) {
	for _, tc := range []struct {
		name     string
		def      posixACL
		mode     uint32
		want     posixACL
		wantMode uint32
		more     bool
	}{
		{"file under a named default", acl(uo(7), un(9, 7), gobj(5), mk(7), ot(0)), 0o666,
			acl(uo(6), un(9, 7), gobj(5), mk(6), ot(0)), 0o660, true},
		{"directory under a named default", acl(uo(7), un(9, 7), gobj(5), mk(7), ot(0)), 0o777,
			acl(uo(7), un(9, 7), gobj(5), mk(7), ot(0)), 0o770, true},
		{"minimal default", acl(uo(7), gobj(5), ot(0)), 0o666,
			acl(uo(6), gobj(4), ot(0)), 0o640, false},
		{"type and setgid bits kept", acl(uo(7), gobj(7), ot(7)), syscall.S_IFREG | syscall.S_ISGID | 0o644,
			acl(uo(6), gobj(4), ot(4)), syscall.S_IFREG | syscall.S_ISGID | 0o644, false},
	} {
		a := append(posixACL(nil), tc.def...)
		mode, more := a.createMasked(tc.mode)
		require.Equal(t, tc.want, a, tc.name)
		require.Equal(t, tc.wantMode, mode, tc.name)
		require.Equal(t, tc.more, more, tc.name)
	}
}

func TestUmaskFold(t *testing.T) {
	for _, mode := range []uint32{0, 0o644, syscall.S_IFCHR | 0o7777, syscall.S_IFDIR | 0o755} {
		for _, umask := range []uint32{0, 0o022, 0o077, 0o777} {
			m, u := unfoldUmask(foldUmask(mode, umask))
			require.Equal(t, mode, m)
			require.Equal(t, umask, u)
		}
		m, u := unfoldUmask(mode)
		require.Equal(t, mode, m, "a mode with no umask folded in")
		require.Zero(t, u)
	}
}

// TestSessionACL checks the daemon's own refusals, which a mount's kernel
// makes before it asks (a bad blob, a default ACL on a file), and its
// rules for what it stores.
func TestSessionACL(t *testing.T) {
	ctx := context.Background()
	e := NewTestEngine(t, nil)
	_, err := e.Catalog().CreateSession(ctx, "s", "")
	require.NoError(t, err)
	s, err := e.live(ctx, "s")
	require.NoError(t, err)
	dir, err := s.Mkdir(ctx, s.root, "d", 0o2775, Owner{UID: 1, GID: 1})
	require.NoError(t, err)
	f, err := s.Create(ctx, dir, "f", 0o2775, Owner{UID: 1, GID: 1})
	require.NoError(t, err)

	requireErrno(t, s.SetXattr(f, aclAccessXattr, []byte{2, 0, 0, 0, 1}, 0), syscall.EINVAL)
	requireErrno(t, s.SetXattr(f, aclAccessXattr, acl(uo(6), gobj(4)).encode(), 0), syscall.EINVAL)
	requireErrno(t, s.SetXattr(f, aclDefaultXattr, acl(uo(6), gobj(4), ot(4)).encode(), 0), syscall.EACCES)
	requireErrno(t, s.SetXattr(f, "system.other", nil, 0), syscall.EOPNOTSUPP)

	// Equivalent to a mode: the mode, no xattr; setgid kept for a caller
	// in the group.
	require.NoError(t, s.SetXattr(f, aclAccessXattr, acl(uo(7), gobj(5), ot(0)).encode(), 0))
	require.Equal(t, uint32(0o2750), f.mode)
	_, err = s.GetXattr(f, aclAccessXattr)
	requireErrno(t, err, syscall.ENODATA)

	// More than a mode: stored, the group bits are the mask's, and the
	// kernel's word drops setgid.
	named := acl(uo(6), un(9, 7), gobj(4), mk(5), ot(0))
	require.NoError(t, s.SetXattr(f, aclAccessXattr, named.encode(), xattrKillSGID))
	require.Equal(t, uint32(0o650), f.mode)
	v, err := s.GetXattr(f, aclAccessXattr)
	require.NoError(t, err)
	require.Equal(t, named.encode(), v)

	// chmod rewrites it.
	m := uint32(0o604)
	require.NoError(t, s.Setattr(ctx, f, SetAttr{Mode: &m}))
	v, err = s.GetXattr(f, aclAccessXattr)
	require.NoError(t, err)
	require.Equal(t, acl(uo(6), un(9, 7), gobj(4), mk(0), ot(4)).encode(), v)

	// A header alone removes it.
	require.NoError(t, s.SetXattr(f, aclAccessXattr, posixACL(nil).encode(), 0))
	_, err = s.GetXattr(f, aclAccessXattr)
	requireErrno(t, err, syscall.ENODATA)

	// An ACL that does not decode, which only an imported tree can hold,
	// makes a create in its directory fail, and a chmod leave it alone.
	bad := []byte{2, 0, 0, 0, 1, 0, 7, 0, 0xff, 0xff, 0xff, 0xff}
	dir.xattrs = map[string][]byte{aclDefaultXattr: bad}
	_, err = s.Create(ctx, dir, "g", 0o644, Owner{})
	require.ErrorIs(t, err, cas.ErrCorrupt)
	f.xattrs[aclAccessXattr] = bad
	require.NoError(t, s.Setattr(ctx, f, SetAttr{Mode: &m}))
	require.Equal(t, bad, f.xattrs[aclAccessXattr])
}

// FuzzDecodeACL checks that every ACL the decoder accepts is valid and
// encodes back to what it decodes from.
func FuzzDecodeACL(f *testing.F) {
	f.Add(acl(uo(6), gobj(4), ot(4)).encode())
	f.Add(acl(uo(7), un(1000, 6), gobj(5), gn(100, 7), mk(7), ot(0)).encode())
	f.Add([]byte{2, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeACL(b)
		if err != nil || a == nil {
			return
		}
		require.NoError(t, a.valid())
		enc := a.encode()
		again, err := decodeACL(enc)
		require.NoError(t, err)
		require.Equal(t, a, again)
		require.True(t, bytes.Equal(enc, again.encode()))
		perm, _ := a.equivMode()
		require.Zero(t, perm&^0o777)
		c := append(posixACL(nil), a...)
		c.chmod(perm)
		require.Equal(t, a.encode(), c.encode(), "chmod to its own mode changes nothing")
	})
}

// aclMount mounts a fresh session that nobody can reach, for the tests
// that need root, setpriv and the acl tools.
func aclMount(t *testing.T, e *Engine, session string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	needTool(t, "setpriv")
	needTool(t, "setfacl")
	needTool(t, "getfacl")
	m := MountForTest(t, e, session, "", MountOptions{AllowOther: true})
	t.Logf("mounted over %s", m.Transport())
	reachable(t, m.Dir())
	return m.Dir()
}

// reachable opens the directories above d to everyone: t.TempDir makes
// them 0700.
func reachable(t *testing.T, d string) {
	t.Helper()
	for p := filepath.Dir(d); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
}

// runIn runs a command as the test's user (root).
func runIn(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %v: %s", name, args, out)
	return string(out)
}

// nobodyMay asserts whether nobody may run script in dir.
func nobodyMay(t *testing.T, dir, script string, ok bool) {
	t.Helper()
	out, err := asNobody(t, dir, script)
	if ok {
		require.NoError(t, err, "%s: %s", script, out)
		return
	}
	require.Error(t, err, "%s must fail: %s", script, out)
	require.Contains(t, out, "ermission denied", script)
}

// getACL returns the ACL xattr name of path; nil for none.
func getACL(t *testing.T, path, name string) posixACL {
	t.Helper()
	buf := make([]byte, 1024)
	n, err := unix.Getxattr(path, name, buf)
	if errors.Is(err, unix.ENODATA) {
		return nil
	}
	require.NoError(t, err, "getxattr %s %s", path, name)
	a, err := decodeACL(buf[:n])
	require.NoError(t, err)
	return a
}

// TestACLEnforced: the kernel enforces ACLs set with setfacl and with raw
// xattrs, grants and denials, and the mask that chmod rewrites.
func TestACLEnforced(t *testing.T) {
	t.Parallel()
	e := NewTestEngine(t, nil)
	d := aclMount(t, e, "s")
	for _, f := range []string{"tool", "raw", "deny"} {
		require.NoError(t, os.WriteFile(filepath.Join(d, f), []byte(f), 0o600))
	}
	require.NoError(t, os.Chmod(filepath.Join(d, "deny"), 0o644))
	nobodyMay(t, d, "cat tool", false)
	nobodyMay(t, d, "cat raw", false)
	nobodyMay(t, d, "cat deny", true)

	runIn(t, d, "setfacl", "-m", "u:nobody:r", "tool")
	require.NoError(t, unix.Setxattr(filepath.Join(d, "raw"), aclAccessXattr, acl(uo(6), un(nobody, 4), gobj(0), mk(4), ot(0)).encode(), 0))
	runIn(t, d, "setfacl", "-m", "u:nobody:-", "deny")
	nobodyMay(t, d, "cat tool", true)
	nobodyMay(t, d, "cat raw", true)
	nobodyMay(t, d, "cat deny", false)
	nobodyMay(t, d, "echo x >> tool", false)
	require.Equal(t, uint32(syscall.S_IFREG|0o640), stat(t, filepath.Join(d, "tool")).Mode, "the group bits are the mask")
	require.Equal(t, acl(uo(6), un(nobody, 4), gobj(0), mk(4), ot(0)), getACL(t, filepath.Join(d, "tool"), aclAccessXattr))
	require.Contains(t, runIn(t, d, "getfacl", "-c", "deny"), "user:nobody:---")

	// chmod rewrites the mask, and the kernel checks the new one.
	require.NoError(t, os.Chmod(filepath.Join(d, "tool"), 0o600))
	require.Contains(t, runIn(t, d, "getfacl", "-c", "tool"), "mask::---")
	nobodyMay(t, d, "cat tool", false)
	require.NoError(t, os.Chmod(filepath.Join(d, "tool"), 0o660))
	require.Contains(t, runIn(t, d, "getfacl", "-c", "tool"), "mask::rw-")
	nobodyMay(t, d, "cat tool", true)

	// An ACL that says no more than a mode is the mode.
	runIn(t, d, "setfacl", "-b", "tool")
	runIn(t, d, "setfacl", "-m", "u::rwx,g::r,o::-", "tool")
	require.Equal(t, uint32(syscall.S_IFREG|0o740), stat(t, filepath.Join(d, "tool")).Mode)
	require.Nil(t, getACL(t, filepath.Join(d, "tool"), aclAccessXattr))

	// A new ACL drops setgid for an owner outside the file's group, as
	// posix_acl_update_mode does, and keeps it for root.
	for _, f := range []string{"sgid", "rootsgid"} {
		p := filepath.Join(d, f)
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		require.NoError(t, os.Chown(p, nobody, 1234))
		require.NoError(t, unix.Chmod(p, 0o2660))
	}
	out, err := asNobody(t, d, "setfacl -m u:0:r sgid")
	require.NoError(t, err, out)
	require.Equal(t, uint32(syscall.S_IFREG|0o660), stat(t, filepath.Join(d, "sgid")).Mode)
	runIn(t, d, "setfacl", "-m", "u:0:r", "rootsgid")
	require.Equal(t, uint32(syscall.S_IFREG|0o2660), stat(t, filepath.Join(d, "rootsgid")).Mode)

	// Removing an ACL a node does not have succeeds, as on ext4.
	for range 2 {
		require.NoError(t, unix.Removexattr(filepath.Join(d, "raw"), aclAccessXattr))
	}
	require.NoError(t, unix.Removexattr(d, aclDefaultXattr))
	nobodyMay(t, d, "cat raw", false)

	// The kernel's own refusals, before the daemon hears of them.
	requireErrno(t, unix.Setxattr(filepath.Join(d, "raw"), aclAccessXattr, []byte{2, 0, 0, 0, 1}, 0), syscall.EINVAL)
	requireErrno(t, unix.Setxattr(filepath.Join(d, "raw"), aclDefaultXattr, acl(uo(6), gobj(4), ot(4)).encode(), 0), syscall.EACCES)
	out2, err := exec.Command("setfacl", "-d", "-m", "u:nobody:r", filepath.Join(d, "raw")).CombinedOutput()
	require.Error(t, err, "%s", out2)
}

// TestACLInherit: a directory's default ACL, not the umask, masks what is
// created in it; without one the umask applies, as the daemon applies it.
func TestACLInherit(t *testing.T) {
	t.Parallel()
	e := NewTestEngine(t, nil)
	d := aclMount(t, e, "s")
	require.NoError(t, os.Mkdir(filepath.Join(d, "shared"), 0o755))
	runIn(t, d, "setfacl", "-m", "u:nobody:rwx", "shared")
	runIn(t, d, "setfacl", "-d", "-m", "u:nobody:rwx", "shared")
	out, err := asNobody(t, d, "umask 077 && echo hi > shared/f && mkdir shared/sub && echo x > shared/sub/g && mkfifo shared/p && ln -s f shared/l")
	require.NoError(t, err, out)

	def := acl(uo(7), un(nobody, 7), gobj(5), mk(7), ot(5))
	require.Equal(t, def, getACL(t, filepath.Join(d, "shared"), aclDefaultXattr))
	for p, want := range map[string]struct {
		mode        uint32
		access, def posixACL
	}{
		"shared/f":     {syscall.S_IFREG | 0o664, acl(uo(6), un(nobody, 7), gobj(5), mk(6), ot(4)), nil},
		"shared/p":     {syscall.S_IFIFO | 0o664, acl(uo(6), un(nobody, 7), gobj(5), mk(6), ot(4)), nil},
		"shared/sub":   {syscall.S_IFDIR | 0o775, acl(uo(7), un(nobody, 7), gobj(5), mk(7), ot(5)), def},
		"shared/sub/g": {syscall.S_IFREG | 0o664, acl(uo(6), un(nobody, 7), gobj(5), mk(6), ot(4)), nil},
	} {
		path := filepath.Join(d, p)
		require.Equal(t, want.mode, stat(t, path).Mode, "%s: the umask is not applied", p)
		require.Equal(t, want.access, getACL(t, path, aclAccessXattr), p)
		require.Equal(t, want.def, getACL(t, path, aclDefaultXattr), p)
	}
	require.Equal(t, uint32(syscall.S_IFLNK|0o777), stat(t, filepath.Join(d, "shared/l")).Mode)
	require.Contains(t, runIn(t, d, "getfacl", "-c", "shared/f"), "user:nobody:rwx\t#effective:rw-")

	// Without a default ACL the umask applies.
	cmd := exec.Command("/bin/sh", "-c", "umask 077 && echo hi > f && mkdir d && mkfifo p && touch shared/sub/x")
	cmd.Dir = d
	out2, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out2)
	// An O_TMPFILE file, named by linkat, is masked as a created one (a
	// dir_fd makes Python call linkat(2), which follows the link).
	py := needTool(t, "/usr/bin/python3")
	tmpfile := "import os\nos.umask(0o077)\nfor d in ('.', 'shared/sub'):\n    fd = os.open(d, os.O_TMPFILE | os.O_WRONLY, 0o666)\n    os.link('/proc/self/fd/%d' % fd, d + '/t', src_dir_fd=os.open('.', os.O_RDONLY), follow_symlinks=True)\n"
	cmd = exec.Command(py, "-c", tmpfile)
	cmd.Dir = d
	out2, err = cmd.CombinedOutput()
	require.NoError(t, err, "%s", out2)
	for p, mode := range map[string]uint32{"f": syscall.S_IFREG | 0o600, "d": syscall.S_IFDIR | 0o700, "p": syscall.S_IFIFO | 0o600, "shared/sub/x": syscall.S_IFREG | 0o664, "t": syscall.S_IFREG | 0o600, "shared/sub/t": syscall.S_IFREG | 0o664} {
		require.Equal(t, mode, stat(t, filepath.Join(d, p)).Mode, p)
	}
	require.Equal(t, acl(uo(6), un(nobody, 7), gobj(5), mk(6), ot(4)), getACL(t, filepath.Join(d, "shared/sub/t"), aclAccessXattr))
}

// aclTree makes a file and a directory with ACLs in d, and returns a
// check that a copy of d in another directory has them.
func aclTree(t *testing.T, d string) (check func(what, dir string)) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(d, "f"), []byte("f"), 0o600))
	require.NoError(t, os.Mkdir(filepath.Join(d, "dir"), 0o700))
	runIn(t, d, "setfacl", "-m", "u:nobody:r", "f")
	runIn(t, d, "setfacl", "-m", "u:nobody:rx", "-m", "d:u:nobody:rwx", "dir")
	access := getACL(t, filepath.Join(d, "f"), aclAccessXattr)
	dirAccess := getACL(t, filepath.Join(d, "dir"), aclAccessXattr)
	dirDefault := getACL(t, filepath.Join(d, "dir"), aclDefaultXattr)
	require.NotNil(t, access)
	require.NotNil(t, dirAccess)
	require.NotNil(t, dirDefault)
	return func(what, dir string) {
		t.Helper()
		require.Equal(t, access, getACL(t, filepath.Join(dir, "f"), aclAccessXattr), what)
		require.Equal(t, dirAccess, getACL(t, filepath.Join(dir, "dir"), aclAccessXattr), what)
		require.Equal(t, dirDefault, getACL(t, filepath.Join(dir, "dir"), aclDefaultXattr), what)
		require.Equal(t, uint32(syscall.S_IFREG|0o640), stat(t, filepath.Join(dir, "f")).Mode, what)
		require.Equal(t, uint32(syscall.S_IFDIR|0o750), stat(t, filepath.Join(dir, "dir")).Mode, what)
	}
}

// TestACLRoundTrip: ACLs are kept by capture, fork, restore, a remount
// over the same store, and tar export and import; a restore drops the
// ACLs the kernel caches.
func TestACLRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := cas.NewMemory()
	e := NewTestEngine(t, store)
	d := aclMount(t, e, "s")
	check := aclTree(t, d)
	access := getACL(t, filepath.Join(d, "f"), aclAccessXattr)

	// copied checks a copy of s as session in e: its root denies nobody
	// until its ACL is gone, and then its nodes' ACLs let nobody in.
	copied := func(what string, e *Engine, session string) {
		t.Helper()
		m := MountForTest(t, e, session, "", MountOptions{AllowOther: true})
		reachable(t, m.Dir())
		check(what, m.Dir())
		nobodyMay(t, m.Dir(), "ls .", false)
		runIn(t, m.Dir(), "setfacl", "-b", "-m", "o::rx", ".")
		nobodyMay(t, m.Dir(), "cat f && ls dir", true)
	}

	// The root's own ACL denies nobody; its inode stays across a restore.
	require.NoError(t, os.Chmod(d, 0o750))
	runIn(t, d, "setfacl", "-m", "u:nobody:-", ".")
	nobodyMay(t, d, "ls .", false)

	snap, id, err := e.Capture(ctx, "s", "acl", nil)
	require.NoError(t, err)
	check("snapshot", mountSnapshot(t, e, id))
	_, err = e.Fork(ctx, id, "fork")
	require.NoError(t, err)
	copied("fork", e, "fork")

	// A restore brings the ACLs back, and the kernel checks those, not
	// the ones it cached: a path walk through the root uses the root's
	// cached ACL (a stat would have it fetched again).
	runIn(t, d, "setfacl", "-b", "dir")
	runIn(t, d, "setfacl", "-m", "u:nobody:rx", ".")
	nobodyMay(t, d, "cat ./f", true)
	nobodyMay(t, d, "cat ./f", true)
	require.NoError(t, e.Restore(ctx, "s", id))
	nobodyMay(t, d, "cat ./f", false)
	check("restore", d)

	// A daemon started again over the store.
	require.NoError(t, e.Sync(ctx, "fork"))
	e2 := NewTestEngine(t, store)
	m2 := MountForTest(t, e2, "fork", "", MountOptions{AllowOther: true})
	reachable(t, m2.Dir())
	check("remount", m2.Dir())
	nobodyMay(t, m2.Dir(), "cat f && ls dir", true)

	// tar: the ACLs ride as SCHILY.xattr records, as GNU tar's --xattrs
	// writes them.
	var buf bytes.Buffer
	require.NoError(t, archive.Export(ctx, store, snap.Root, &buf, nil))
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	found := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		if strings.TrimPrefix(h.Name, "./") == "f" {
			require.Equal(t, string(access.encode()), h.PAXRecords["SCHILY.xattr."+aclAccessXattr])
			found = true
		}
	}
	require.True(t, found, "f in the archive")
	store3 := cas.NewMemory()
	res, err := archive.Import(ctx, store3, &buf, archive.ImportOptions{})
	require.NoError(t, err)
	e3 := NewTestEngine(t, store3)
	_, err = e3.Catalog().CreateSessionAt(ctx, "imported", res.Root)
	require.NoError(t, err)
	copied("tar", e3, "imported")
}

// TestACLCost: ACLs cost an owner no request (the kernel checks an owner
// by the mode alone); another user's opens make the kernel fetch the
// ACLs it dropped with the attributes a read's atime made stale.
func TestACLCost(t *testing.T) {
	t.Parallel()
	obs := &opCounter{}
	e := newTestEngine(t, nil, Options{Observer: obs})
	d := aclMount(t, e, "s")
	const files = 50
	for i := range files {
		require.NoError(t, os.WriteFile(filepath.Join(d, fmt.Sprint(i)), []byte("x"), 0o644))
	}
	before := obs.n[OpGetXAttr].Load()
	for range 2 {
		runIn(t, d, "/bin/sh", "-c", "cat * >/dev/null")
	}
	require.Zero(t, obs.n[OpGetXAttr].Load()-before, "GETXATTR for the owner's reads")
	before = obs.n[OpGetXAttr].Load()
	nobodyMay(t, d, "cat * >/dev/null", true)
	first := obs.n[OpGetXAttr].Load() - before
	nobodyMay(t, d, "cat * >/dev/null", true)
	t.Logf("another user's cat of %d files: %d GETXATTR, then %d", files, first, obs.n[OpGetXAttr].Load()-before-first)
}

// TestACLGNUTar: GNU tar's --xattrs archives a mount's ACLs so that
// import keeps them, and restores an export's into a mount.
func TestACLGNUTar(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := cas.NewMemory()
	e := NewTestEngine(t, store)
	d := aclMount(t, e, "s")
	needTool(t, "tar")
	check := aclTree(t, d)

	gnu := filepath.Join(t.TempDir(), "gnu.tar")
	runIn(t, d, "tar", "--xattrs", "--format=posix", "-cf", gnu, ".")
	f, err := os.Open(gnu)
	require.NoError(t, err)
	defer f.Close()
	res, err := archive.Import(ctx, store, f, archive.ImportOptions{})
	require.NoError(t, err)
	_, err = e.Catalog().CreateSessionAt(ctx, "imported", res.Root)
	require.NoError(t, err)
	check("import of GNU tar's archive", MountForTest(t, e, "imported", "", MountOptions{}).Dir())

	snap, _, err := e.Capture(ctx, "s", "acl", nil)
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, archive.Export(ctx, store, snap.Root, &buf, nil))
	exported := filepath.Join(t.TempDir(), "export.tar")
	require.NoError(t, os.WriteFile(exported, buf.Bytes(), 0o600))
	x := MountForTest(t, e, "extracted", "", MountOptions{}).Dir()
	runIn(t, x, "tar", "--xattrs", "--xattrs-include=*", "-xf", exported)
	check("GNU tar's extract of an export", x)
}
