package fusefs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const nobody = 65534

// asNobody runs a shell script as uid and gid 65534 without groups.
func asNobody(t *testing.T, dir, script string) (string, error) {
	t.Helper()
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/bin/sh", "-c", script)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestPermissions(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	needTool(t, "setpriv")
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "s", "", MountOptions{AllowOther: true})
	d := m.Dir()
	// t.TempDir makes its directories 0700; let nobody reach the mount.
	for p := filepath.Dir(d); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}

	require.NoError(t, os.WriteFile(filepath.Join(d, "secret"), []byte("s"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(d, "public"), []byte("p"), 0o644))
	require.NoError(t, os.Mkdir(filepath.Join(d, "shared"), 0o755))
	require.NoError(t, unix.Chmod(filepath.Join(d, "shared"), 0o1777))
	require.NoError(t, os.WriteFile(filepath.Join(d, "shared/rootfile"), []byte("r"), 0o666))
	require.NoError(t, os.Mkdir(filepath.Join(d, "private"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(d, "open"), []byte("o"), 0o666))
	require.NoError(t, os.Chmod(filepath.Join(d, "open"), 0o666)) // past the umask

	checkNobodyDenied(t, d)
	checkNobodyCreates(t, d)
	checkSetgidDir(t, d)
	checkSetuidCleared(t, d)

	// Ownership survives a capture and fork.
	fm := forkMount(t, e, "s", "perm-fork")
	st := stat(t, filepath.Join(fm.Dir(), "shared/f022"))
	require.Equal(t, uint32(nobody), st.Uid)
	require.Equal(t, uint32(syscall.S_IFREG|0o640), st.Mode)
	require.Equal(t, uint32(syscall.S_IFDIR|0o1777), stat(t, filepath.Join(fm.Dir(), "shared")).Mode)
}

// checkNobodyDenied requires nobody to be refused what the modes of the
// files below d (made by TestPermissions) refuse, and allowed the rest.
func checkNobodyDenied(t *testing.T, d string) {
	t.Helper()
	for _, tc := range []struct {
		name, script string
		ok           bool
	}{
		{"read 0600 root file", "cat secret", false},
		{"read 0644 root file", "cat public", true},
		{"write 0644 root file", "echo x >> public", false},
		{"create in root 0755 dir", "touch new", false},
		{"enter 0700 root dir", "ls private", false},
		{"delete others' file in sticky dir", "rm -f shared/rootfile", false},
		{"rename others' file in sticky dir", "mv shared/rootfile shared/mine", false},
		// Not in the sticky directory: fs.protected_regular refuses O_CREAT
		// of others' files there, on every filesystem.
		{"write others' 0666 file", "echo y >> open", true},
		{"chmod root file", "chmod 777 public", false},
		{"chown own file", "touch shared/own && chown 0 shared/own", false},
	} {
		out, err := asNobody(t, d, tc.script)
		if tc.ok {
			require.NoError(t, err, "%s: %s", tc.name, out)
		} else {
			require.Error(t, err, "%s must fail: %s", tc.name, out)
			require.True(t, strings.Contains(out, "ermission denied") || strings.Contains(out, "not permitted"), "%s: %s", tc.name, out)
		}
	}
	require.Equal(t, "s", read(t, filepath.Join(d, "secret")))
	require.Equal(t, "r", read(t, filepath.Join(d, "shared/rootfile")))
	require.Equal(t, "oy\n", read(t, filepath.Join(d, "open")))
}

// checkNobodyCreates requires the files nobody creates in shared to be
// nobody's, with the modes the umask gives, and nobody to be able to
// delete them in the sticky directory and change their mode.
func checkNobodyCreates(t *testing.T, d string) {
	t.Helper()
	for _, tc := range []struct {
		umask             string
		fileMode, dirMode uint32
	}{
		{"022", 0o644, 0o755},
		{"077", 0o600, 0o700},
	} {
		f, dir := filepath.Join("shared", "f"+tc.umask), filepath.Join("shared", "d"+tc.umask)
		out, err := asNobody(t, d, "umask "+tc.umask+" && echo hi > "+f+" && mkdir "+dir+" && touch "+dir+"/inner")
		require.NoError(t, err, out)
		for p, mode := range map[string]uint32{f: syscall.S_IFREG | tc.fileMode, dir: syscall.S_IFDIR | tc.dirMode, dir + "/inner": syscall.S_IFREG | tc.fileMode} {
			st := stat(t, filepath.Join(d, p))
			require.Equal(t, mode, st.Mode, "%s under umask %s", p, tc.umask)
			require.Equal(t, uint32(nobody), st.Uid, p)
			require.Equal(t, uint32(nobody), st.Gid, p)
		}
	}
	// The owner may delete its own files in the sticky directory, and
	// change their mode.
	out, err := asNobody(t, d, "chmod 640 shared/f022 && rm shared/f077 && rm -r shared/d077")
	require.NoError(t, err, out)
	require.Equal(t, uint32(syscall.S_IFREG|0o640), stat(t, filepath.Join(d, "shared/f022")).Mode)
}

// checkSetgidDir requires a setgid directory to hand its group down (BSD
// semantics, as ext4).
func checkSetgidDir(t *testing.T, d string) {
	t.Helper()
	require.NoError(t, os.Mkdir(filepath.Join(d, "team"), 0o755))
	require.NoError(t, os.Chown(filepath.Join(d, "team"), 0, 1234))
	require.NoError(t, unix.Chmod(filepath.Join(d, "team"), 0o2777))
	out, err := asNobody(t, d, "umask 022 && touch team/f && mkdir team/sub")
	require.NoError(t, err, out)
	st := stat(t, filepath.Join(d, "team/f"))
	require.Equal(t, uint32(1234), st.Gid)
	require.Equal(t, uint32(nobody), st.Uid)
	st = stat(t, filepath.Join(d, "team/sub"))
	require.Equal(t, uint32(1234), st.Gid)
	require.Equal(t, uint32(syscall.S_IFDIR|0o2755), st.Mode, "a subdirectory inherits setgid")
}

// checkSetuidCleared requires a write to a setuid file as another user, a
// chown and a truncation to clear the bits they clear on ext4, and root's
// own write to keep them.
func checkSetuidCleared(t *testing.T, d string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(d, "suid"), []byte("#!/bin/sh\n"), 0o644))
	require.NoError(t, unix.Chmod(filepath.Join(d, "suid"), 0o4777))
	out, err := asNobody(t, d, "echo x >> suid")
	require.NoError(t, err, out)
	require.Equal(t, uint32(syscall.S_IFREG|0o777), stat(t, filepath.Join(d, "suid")).Mode, "write by another user clears setuid")
	require.NoError(t, unix.Chmod(filepath.Join(d, "suid"), 0o4755))
	require.NoError(t, os.Chown(filepath.Join(d, "suid"), 1, 1))
	require.Equal(t, uint32(syscall.S_IFREG|0o755), stat(t, filepath.Join(d, "suid")).Mode, "chown clears setuid")
	// Truncating (open O_TRUNC, truncate(1)) drops setuid, setgid with
	// group execute and the file's capabilities; setgid without group
	// execute stays only for a writer in the file's group (as on ext4
	// since Linux 5.15 dropped mandatory locking). Root's own write keeps
	// the bits.
	for _, c := range []struct {
		mode uint32
		gid  int
		cmd  string
		want uint32
	}{
		{0o6777, 0, ": > suid", 0o777},
		{0o6777, 0, "truncate -s 3 suid", 0o777},
		{0o2767, 0, "echo y >> suid", 0o767},
		{0o2767, nobody, "echo y >> suid", 0o2767},
		{0o2767, 0, "fallocate -l 100000 suid", 0o767},
		{0o4777, 0, "cp /dev/null suid", 0o777},
	} {
		require.NoError(t, os.Chown(filepath.Join(d, "suid"), 0, c.gid))
		require.NoError(t, unix.Chmod(filepath.Join(d, "suid"), c.mode))
		require.NoError(t, unix.Setxattr(filepath.Join(d, "suid"), "security.capability", capV2, 0))
		out, err = asNobody(t, d, c.cmd)
		require.NoError(t, err, out)
		require.Equal(t, syscall.S_IFREG|c.want, stat(t, filepath.Join(d, "suid")).Mode, c.cmd)
		_, err = unix.Getxattr(filepath.Join(d, "suid"), "security.capability", make([]byte, 64))
		requireErrno(t, err, syscall.ENODATA, "%s drops the capabilities", c.cmd)
	}
	require.NoError(t, unix.Chmod(filepath.Join(d, "suid"), 0o4777))
	f, err := os.OpenFile(filepath.Join(d, "suid"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("root\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, uint32(syscall.S_IFREG|0o4777), stat(t, filepath.Join(d, "suid")).Mode, "root's write keeps setuid")
}

// capV2 is a valid VFS_CAP_REVISION_2 security.capability value granting
// CAP_NET_BIND_SERVICE, as setcap writes it.
var capV2 = []byte{0, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
