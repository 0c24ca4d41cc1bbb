package fusefs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/internal/testkit/loopfs"
)

// An ext4Probe exercises one feature in dir and describes what it saw, in
// words that do not depend on the filesystem (no inode numbers, no
// times but as comparisons).
type ext4Probe struct {
	name string
	run  func(dir string) string
	// differs is the reason, as docs/ARCHITECTURE.md ("Differences from
	// ext4") gives it, why homefs answers otherwise; "" where it must
	// answer as ext4 does.
	differs string
}

// ext4Probes: the features a program may look for, each as ext4 has it.
var ext4Probes = []ext4Probe{
	{name: "fifo", run: probeFifo},
	{name: "unix socket", run: probeSocket},
	{name: "device node", run: probeDevice, differs: "mounts are nodev unless made with --dev"},
	{name: ". and ..", run: probeDots},
	{name: "relatime", run: probeRelatime},
	{name: "O_TMPFILE and linkat", run: probeTmpfile},
	{name: "statx btime", run: probeBtime},
	{name: "holes", run: probeHoles},
	{name: "punch hole", run: probePunch},
	{name: "collapse and insert range", run: probeCollapse, differs: "the kernel's FUSE client refuses them before any request"},
	{name: "fallocate reserves", run: probeReserve, differs: "fallocate reserves nothing"},
	{name: "xattr namespaces", run: probeXattrs},
	{name: "POSIX ACLs", run: probeACL},
	{name: "times past 2262", run: probeFarTime, differs: "times are stored from 1677 to 2262"},
}

// TestExt4FeatureProbe runs every probe on a fresh ext4 (default options)
// and on a mount, and holds homefs to ext4's answers but for the listed
// differences, each of which must still differ: a difference that goes
// away must leave the list, and docs/ARCHITECTURE.md, with it.
func TestExt4FeatureProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a loop-mounted ext4 and device nodes need root")
	}
	// 512 MiB or more (sparse) makes mkfs's default inodes, of 256 bytes,
	// which hold times past 2038.
	native := loopfs.Ext4(t, 600<<20, "")
	_, m := newMount(t)
	for _, p := range ext4Probes {
		t.Run(p.name, func(t *testing.T) {
			nd, hd := filepath.Join(native, p.name), filepath.Join(m.Dir(), p.name)
			require.NoError(t, os.Mkdir(nd, 0o755))
			require.NoError(t, os.Mkdir(hd, 0o755))
			want, got := p.run(nd), p.run(hd)
			if p.differs == "" {
				require.Equal(t, want, got, "homefs answers otherwise than ext4")
				return
			}
			require.NotEqual(t, want, got, "listed as a difference (%s), but homefs answers as ext4 does", p.differs)
			t.Logf("differs as listed (%s): ext4 %q, homefs %q", p.differs, want, got)
		})
	}
}

// errnoOf names err's errno, "ok" for nil.
func errnoOf(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.As(err, &errno):
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func probeFifo(dir string) string {
	p := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(p, 0o640); err != nil {
		return "mkfifo: " + errnoOf(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "lstat: " + errnoOf(err)
	}
	done := make(chan string, 1)
	go func() {
		b, err := os.ReadFile(p)
		done <- fmt.Sprintf("%s %s", b, errnoOf(err))
	}()
	err := os.WriteFile(p, []byte("through"), 0)
	return fmt.Sprintf("mode %o; write %s; read %s", st.Mode, errnoOf(err), <-done)
}

func probeSocket(dir string) string {
	p := filepath.Join(dir, "sock")
	l, err := net.Listen("unix", p)
	if err != nil {
		return "bind: " + errnoOf(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			_, _ = c.Write([]byte("hi"))
			c.Close()
		}
	}()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "lstat: " + errnoOf(err)
	}
	c, err := net.Dial("unix", p)
	if err != nil {
		return fmt.Sprintf("type %o; connect %s", st.Mode&unix.S_IFMT, errnoOf(err))
	}
	defer c.Close()
	buf := make([]byte, 2)
	_, err = c.Read(buf)
	return fmt.Sprintf("type %o; connect ok; read %q %s", st.Mode&unix.S_IFMT, buf, errnoOf(err))
}

// probeDevice makes /dev/null's node and writes to it.
func probeDevice(dir string) string {
	p := filepath.Join(dir, "null")
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		return "mknod: " + errnoOf(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return "lstat: " + errnoOf(err)
	}
	err := os.WriteFile(p, []byte("gone"), 0)
	return fmt.Sprintf("mode %o rdev %d:%d; write %s", st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), errnoOf(err))
}

// probeDots lists a directory with getdents64, which shows . and ..
// (os.ReadDir leaves them out).
func probeDots(dir string) string {
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		return "create: " + errnoOf(err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return "open: " + errnoOf(err)
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return "getdents: " + errnoOf(err)
		}
		if n == 0 {
			break
		}
		for off := 0; off < n; {
			reclen := int(binary.NativeEndian.Uint16(buf[off+16:]))
			name := buf[off+19 : off+reclen]
			names = append(names, strings.TrimRight(string(name), "\x00"))
			off += reclen
		}
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

// probeRelatime: a read moves an access time older than the last change,
// and a second read does not move it again.
func probeRelatime(dir string) string {
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("content"), 0o644); err != nil {
		return "write: " + errnoOf(err)
	}
	mtime := time.Now().Add(-time.Minute)
	if err := os.Chtimes(p, mtime.Add(-time.Hour), mtime); err != nil {
		return "chtimes: " + errnoOf(err)
	}
	atime := func() time.Time {
		var st unix.Stat_t
		_ = unix.Stat(p, &st)
		return time.Unix(st.Atim.Unix())
	}
	_, _ = os.ReadFile(p)
	first := atime()
	_, _ = os.ReadFile(p)
	return fmt.Sprintf("first read moves it past mtime %t; second read moves it %t", first.After(mtime), !atime().Equal(first))
}

func probeTmpfile(dir string) string {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR, 0o640)
	if err != nil {
		return "open: " + errnoOf(err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("unnamed")); err != nil {
		return "write: " + errnoOf(err)
	}
	var st unix.Stat_t
	_ = unix.Fstat(fd, &st)
	before := st.Nlink
	p := filepath.Join(dir, "named")
	err = unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), unix.AT_FDCWD, p, unix.AT_SYMLINK_FOLLOW)
	b, rerr := os.ReadFile(p)
	return fmt.Sprintf("nlink %d; linkat %s; read %q %s", before, errnoOf(err), b, errnoOf(rerr))
}

func probeBtime(dir string) string {
	p := filepath.Join(dir, "f")
	before := time.Now().Add(-time.Second)
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return "create: " + errnoOf(err)
	}
	var sx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, p, 0, unix.STATX_BTIME, &sx); err != nil {
		return "statx: " + errnoOf(err)
	}
	has := sx.Mask&unix.STATX_BTIME != 0
	return fmt.Sprintf("btime %t, at creation %t", has, has && time.Unix(sx.Btime.Sec, int64(sx.Btime.Nsec)).After(before))
}

// probeHoles: a 1 MiB file with one 64 KiB run of data at 512 KiB (a
// whole chunk of homefs's, so that what is probed is holes, not their
// granularity).
func probeHoles(dir string) string {
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		return "create: " + errnoOf(err)
	}
	defer f.Close()
	if err := f.Truncate(1 << 20); err != nil {
		return "truncate: " + errnoOf(err)
	}
	if _, err := f.WriteAt(randBytes(7, 64<<10), 512<<10); err != nil {
		return "write: " + errnoOf(err)
	}
	if err := f.Sync(); err != nil {
		return "fsync: " + errnoOf(err)
	}
	data, err1 := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	hole, err2 := unix.Seek(int(f.Fd()), 512<<10, unix.SEEK_HOLE)
	var st unix.Stat_t
	_ = unix.Fstat(int(f.Fd()), &st)
	return fmt.Sprintf("blocks %d; SEEK_DATA %d %s; SEEK_HOLE %d %s", st.Blocks, data, errnoOf(err1), hole, errnoOf(err2))
}

func probePunch(dir string) string {
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, randBytes(8, 256<<10), 0o644); err != nil {
		return "write: " + errnoOf(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return "open: " + errnoOf(err)
	}
	defer f.Close()
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 64<<10, 64<<10)
	_ = f.Sync()
	var st unix.Stat_t
	_ = unix.Fstat(int(f.Fd()), &st)
	got := make([]byte, 4)
	_, _ = f.ReadAt(got, 64<<10)
	return fmt.Sprintf("punch %s; size %d blocks %d; reads %v", errnoOf(err), st.Size, st.Blocks, got)
}

func probeCollapse(dir string) string {
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, randBytes(9, 256<<10), 0o644); err != nil {
		return "write: " + errnoOf(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		return "open: " + errnoOf(err)
	}
	defer f.Close()
	collapse := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_COLLAPSE_RANGE, 64<<10, 64<<10)
	insert := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_INSERT_RANGE, 0, 64<<10)
	return fmt.Sprintf("collapse %s; insert %s", errnoOf(collapse), errnoOf(insert))
}

func probeReserve(dir string) string {
	f, err := os.Create(filepath.Join(dir, "f"))
	if err != nil {
		return "create: " + errnoOf(err)
	}
	defer f.Close()
	err = unix.Fallocate(int(f.Fd()), 0, 0, 1<<20)
	var st unix.Stat_t
	_ = unix.Fstat(int(f.Fd()), &st)
	return fmt.Sprintf("fallocate %s; size %d blocks %d", errnoOf(err), st.Size, st.Blocks)
}

func probeXattrs(dir string) string {
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return "create: " + errnoOf(err)
	}
	var out []string
	for _, name := range []string{"user.k", "trusted.k", "security.k", "other.k", "user.", "system.k"} {
		set := unix.Setxattr(p, name, []byte("v"), 0)
		buf := make([]byte, 16)
		n, get := unix.Getxattr(p, name, buf)
		out = append(out, fmt.Sprintf("%s set %s get %s %q", name, errnoOf(set), errnoOf(get), buf[:max(n, 0)]))
	}
	return strings.Join(out, "; ")
}

// probeACL grants nobody read through an access ACL and reads it back.
func probeACL(dir string) string {
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o600); err != nil {
		return "create: " + errnoOf(err)
	}
	entry := func(tag uint16, perm uint16, id uint32) []byte {
		b := binary.LittleEndian.AppendUint16(nil, tag)
		b = binary.LittleEndian.AppendUint16(b, perm)
		return binary.LittleEndian.AppendUint32(b, id)
	}
	const undefined = 0xffffffff
	blob := binary.LittleEndian.AppendUint32(nil, 2)
	blob = append(blob, entry(0x01, 6, undefined)...) // user::rw-
	blob = append(blob, entry(0x02, 4, 65534)...)     // user:nobody:r--
	blob = append(blob, entry(0x04, 0, undefined)...) // group::---
	blob = append(blob, entry(0x10, 4, undefined)...) // mask::r--
	blob = append(blob, entry(0x20, 0, undefined)...) // other::---
	set := unix.Setxattr(p, "system.posix_acl_access", blob, 0)
	buf := make([]byte, 256)
	n, get := unix.Getxattr(p, "system.posix_acl_access", buf)
	var st unix.Stat_t
	_ = unix.Stat(p, &st)
	return fmt.Sprintf("set %s; get %s same %t; mode %o", errnoOf(set), errnoOf(get), n == len(blob) && string(buf[:max(n, 0)]) == string(blob), st.Mode&0o777)
}

func probeFarTime(dir string) string {
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		return "create: " + errnoOf(err)
	}
	// Not os.Chtimes: Go's nanoseconds since 1970 end in 2262 too.
	far := unix.Timespec{Sec: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC).Unix()}
	err := unix.UtimesNano(p, []unix.Timespec{far, far})
	var st unix.Stat_t
	_ = unix.Stat(p, &st)
	return fmt.Sprintf("chtimes %s; year %d", errnoOf(err), time.Unix(st.Mtim.Unix()).UTC().Year())
}
