package fusefs

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// getdents lists dir with getdents64 itself, which shows "." and ".."
// (os.ReadDir drops them), in the order the file system gives.
func getdents(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	got := map[string]uint64{}
	var order []string
	buf := make([]byte, 4096)
	for {
		n, err := unix.Getdents(fd, buf)
		require.NoError(t, err)
		if n == 0 {
			break
		}
		for b := buf[:n]; len(b) > 0; {
			// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
			ino := binary.LittleEndian.Uint64(b)
			reclen := int(binary.LittleEndian.Uint16(b[16:]))
			name := b[19:reclen]
			for i, c := range name {
				if c == 0 {
					name = name[:i]
					break
				}
			}
			got[string(name)] = ino
			order = append(order, string(name))
			b = b[reclen:]
		}
	}
	require.GreaterOrEqual(t, len(order), 2)
	require.Equal(t, []string{".", ".."}, order[:2], "ext4 lists . and .. first")
	return got
}

// TestReaddirDots: getdents64 returns "." and "..", with the inode numbers
// stat gives the directory and its parent, as on ext4; names already
// listed by os.ReadDir stay as they were.
func TestReaddirDots(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	d := m.Dir()
	sub := filepath.Join(d, "a", "b")
	require.NoError(t, os.MkdirAll(sub, 0o755))
	write(t, filepath.Join(sub, "f"), "x")

	got := getdents(t, sub)
	require.Equal(t, map[string]uint64{
		".":  stat(t, sub).Ino,
		"..": stat(t, filepath.Join(d, "a")).Ino,
		"f":  stat(t, filepath.Join(sub, "f")).Ino,
	}, got)
	root := getdents(t, d)
	require.Equal(t, stat(t, d).Ino, root["."])
	require.Contains(t, root, "..")
	require.Len(t, root, 3)

	names, err := os.ReadDir(sub)
	require.NoError(t, err)
	require.Len(t, names, 1)
	require.Equal(t, "f", names[0].Name())
	require.NoError(t, os.RemoveAll(filepath.Join(d, "a")))
	_, err = os.Stat(filepath.Join(d, "a"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestXattrNamespaces: user.*, trusted.* and security.* are stored; a
// namespace ext4 does not have is EOPNOTSUPP on set, get and remove, a
// bare prefix EINVAL; trusted.* is listed to root only.
func TestXattrNamespaces(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	p := filepath.Join(m.Dir(), "f")
	write(t, p, "x")
	for _, name := range []string{"user.a", "trusted.b", "security.c"} {
		require.NoError(t, unix.Setxattr(p, name, []byte("v"), 0), name)
		buf := make([]byte, 8)
		n, err := unix.Getxattr(p, name, buf)
		require.NoError(t, err, name)
		require.Equal(t, "v", string(buf[:n]))
	}
	for _, name := range []string{"foo.bar", "system.foo", "user"} {
		requireErrno(t, unix.Setxattr(p, name, []byte("v"), 0), syscall.EOPNOTSUPP, "set %s", name)
		_, err := unix.Getxattr(p, name, make([]byte, 8))
		requireErrno(t, err, syscall.EOPNOTSUPP, "get %s", name)
		requireErrno(t, unix.Removexattr(p, name), syscall.EOPNOTSUPP, "remove %s", name)
	}
	requireErrno(t, unix.Setxattr(p, "user.", []byte("v"), 0), syscall.EINVAL)

	f, err := os.Open(p) // the user could not reach p in the test's directory
	require.NoError(t, err)
	defer f.Close()
	list := func() (string, error) {
		buf := make([]byte, 256)
		n, err := unix.Flistxattr(int(f.Fd()), buf)
		if err != nil {
			return "", err
		}
		return strings.Join(splitNul(buf[:n]), " "), nil
	}
	names, err := list()
	require.NoError(t, err)
	require.Equal(t, "security.c trusted.b user.a", names)
	// The daemon sees the caller's ids only: uid 0 stands for
	// CAP_SYS_ADMIN, which ext4 asks for.
	names, err = asUser(1000, 1000, list)
	require.NoError(t, err)
	require.Equal(t, "security.c user.a", names, "trusted.* is not listed to a user")
	require.NoError(t, unix.Removexattr(p, "trusted.b"))
	requireErrno(t, unix.Removexattr(p, "trusted.b"), syscall.ENODATA)
}

func splitNul(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		out = append(out, string(b[:i]))
		b = b[min(i+1, len(b)):]
	}
	return out
}
