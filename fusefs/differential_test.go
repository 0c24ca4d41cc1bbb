package fusefs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/fsck"
)

// TestDifferential applies one random sequence of system calls to a
// directory on the native disk and to a homefs mount and requires the same
// outcome from both: every return value and errno, the bytes every read
// returns, and the whole tree at each checkpoint. Along the way it captures
// (the snapshot must hold the tree as the native one was at that moment,
// and pass fsck's verifier and export whole, as homefs's own checks),
// forks (each fork is a pair of its own, a native copy and a mount, and
// takes steps too: no change may reach another session of the family),
// restores (the mount must come back to an earlier native copy) and
// remounts. The
// namespace is small, so that names collide and the error paths run as
// often as the others; open descriptors stay open across captures and
// checkpoints and restores, so that every write path (passed-through
// appenders, staged new files, files the daemon serves, unlinked open
// files, shared writable mappings from another process) is compared.
//
// It runs against three engines: as configured by default (new files
// staged), with every file served by the daemon (NoStaging), and with a
// flush every millisecond racing the steps. HOMEFS_DIFF_SEEDS=N runs seeds
// 1 to N of each instead of the first four (two for the variants), and
// HOMEFS_DIFF_STEPS=N takes N steps a seed instead of 3000.
func TestDifferential(t *testing.T) {
	t.Parallel()
	steps := 3000
	if env := os.Getenv("HOMEFS_DIFF_STEPS"); env != "" {
		n, err := strconv.Atoi(env)
		require.NoError(t, err, "HOMEFS_DIFF_STEPS")
		steps = n
	}
	for _, v := range []struct {
		name  string
		seeds uint64
		opts  Options
	}{
		{"staged", 4, Options{}},
		{"daemon", 2, Options{NoStaging: true}},
		{"flushing", 2, Options{FlushInterval: time.Millisecond}},
	} {
		seeds := v.seeds
		if env := os.Getenv("HOMEFS_DIFF_SEEDS"); env != "" {
			n, err := strconv.ParseUint(env, 10, 32)
			require.NoError(t, err, "HOMEFS_DIFF_SEEDS")
			seeds = n
		}
		for seed := uint64(1); seed <= seeds; seed++ {
			t.Run(fmt.Sprintf("%s/%d", v.name, seed), func(t *testing.T) {
				t.Parallel()
				runDifferential(t, seed, steps, v.opts)
			})
		}
	}
}

const diffSlots = 6

var (
	diffDirs = []string{"", "d0/", "d1/", "d0/e0/"}
	// Files are made under file names and directories under directory
	// names; renames and links mix them now and then.
	diffFiles    = []string{"f0", "f1", "f2", "f3", "l0"}
	diffDirNames = []string{"d0", "d1", "e0"}
	diffNames    = append(slices.Clone(diffFiles), diffDirNames...)
)

// diffWorld is one side of the comparison: a root and the descriptors
// open in it, by slot.
type diffWorld struct {
	root string
	fds  [diffSlots]int
	// stale marks descriptors opened before a restore: their files are no
	// longer in the tree, as if unlinked, except that the native ones
	// still have names (in the tree moved aside), so their nlink differs.
	stale [diffSlots]bool
}

func (w *diffWorld) path(rel string) string { return filepath.Join(w.root, rel) }

func (w *diffWorld) closeAll() {
	for i, fd := range w.fds {
		if fd >= 0 {
			_ = unix.Close(fd)
			w.fds[i] = -1
		}
	}
}

// diffOp is one step: what it does, and how to do it in a world. Both
// worlds run the same closure, so that every random choice is made once.
type diffOp struct {
	desc string
	run  func(w *diffWorld) (string, error)
}

type differential struct {
	t      *testing.T
	r      *rand.Rand
	e      *Engine
	pairs  []*diffPair // the session and its forks
	cur    *diffPair   // the pair the next step runs in
	log    []string
	saved  string   // native copies of the captured trees
	snaps  []string // captured snapshot ids, by copy
	seq    int
	asides int // native trees moved aside by restores
	// verifier checks every snapshot taken as fsck would (see
	// verifySnapshot); it remembers what it verified, so each capture
	// costs what it changed.
	verifier *fsck.Verifier
}

// diffPair is a session's mount and the native directory it must match.
type diffPair struct {
	name          string
	m             *Mount
	native, mount *diffWorld
}

const diffMaxForks = 3

func runDifferential(t *testing.T, seed uint64, steps int, opts Options) {
	d := &differential{
		t: t, r: rand.New(rand.NewPCG(seed, seed*7919)), e: newTestEngine(t, nil, opts),
		saved: t.TempDir(),
	}
	d.verifier = fsck.NewVerifier(d.e.store)
	d.addPair("s", t.TempDir())
	for step := range steps {
		// Forks take steps too: a change in one must never reach another.
		d.cur = d.pairs[0]
		if d.r.IntN(2) == 0 {
			d.cur = d.pairs[d.r.IntN(len(d.pairs))]
		}
		d.step(d.genOp())
		if step%40 == 39 {
			d.checkpoint()
		}
	}
	d.checkpoint()
}

// addPair mounts session, whose tree is the one in nativeRoot.
func (d *differential) addPair(session, nativeRoot string) *diffPair {
	p := &diffPair{name: session, native: &diffWorld{root: nativeRoot}, mount: &diffWorld{}}
	for _, w := range []*diffWorld{p.native, p.mount} {
		for i := range w.fds {
			w.fds[i] = -1
		}
	}
	d.t.Cleanup(p.native.closeAll)
	diffReach(d.t, nativeRoot)
	d.mountPair(p)
	if session == "s" {
		// Open to all users; a fork's root has its snapshot's attributes.
		require.NoError(d.t, os.Chmod(nativeRoot, 0o777))
		require.NoError(d.t, os.Chmod(p.mount.root, 0o777))
	}
	d.pairs = append(d.pairs, p)
	return p
}

func (d *differential) mountPair(p *diffPair) {
	p.m = MountForTest(d.t, d.e, p.name, "", MountOptions{AllowOther: true})
	p.mount.root = p.m.Dir()
	d.t.Cleanup(p.mount.closeAll) // before the mount's unmount
	diffReach(d.t, p.mount.root)
}

// diffReach lets every user reach root: t.TempDir makes its directories
// 0700.
func diffReach(t *testing.T, root string) {
	for dir := filepath.Dir(root); dir != os.TempDir() && dir != "/"; dir = filepath.Dir(dir) {
		require.NoError(t, os.Chmod(dir, 0o755))
	}
}

func (d *differential) history() string {
	return "\nlast steps:\n  " + strings.Join(d.log, "\n  ")
}

func (d *differential) note(s string) {
	d.log = append(d.log, s)
	if len(d.log) > 40 {
		d.log = d.log[1:]
	}
}

// diffUsers are who a step runs as: root most of the time, else one of
// three users without supplementary groups, two of them in one group.
var diffUsers = []struct{ uid, gid int }{{0, 0}, {0, 0}, {0, 0}, {1000, 1000}, {1001, 1000}, {1002, 1002}}

// step runs op in both worlds of the current pair, as one user, and
// requires the same outcome.
func (d *differential) step(op diffOp) {
	u := diffUsers[d.r.IntN(len(diffUsers))]
	d.note(fmt.Sprintf("%s as %d:%d: %s", d.cur.name, u.uid, u.gid, op.desc))
	run := func(w *diffWorld) (string, error) {
		return asUser(u.uid, u.gid, func() (string, error) { return op.run(w) })
	}
	nres, nerr := run(d.cur.native)
	mres, merr := run(d.cur.mount)
	want, got := diffOutcome(nres, nerr), diffOutcome(mres, merr)
	d.log[len(d.log)-1] += " = " + want
	require.Equal(d.t, want, got, "%s: native and homefs differ%s", op.desc, d.history())
}

// asUser runs fn on a thread of its own whose file system ids are uid and
// gid, with no supplementary groups: the kernel checks permissions, and the
// mount records owners, as for that user. The thread ends with fn.
func asUser(uid, gid int, fn func() (string, error)) (string, error) {
	if uid == 0 {
		return fn()
	}
	var res string
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread is not reused
		if _, _, errno := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); errno != 0 {
			err = fmt.Errorf("setgroups: %w", errno)
			return
		}
		if err = unix.Setfsgid(gid); err == nil {
			err = unix.Setfsuid(uid)
		}
		if err == nil {
			res, err = fn()
		}
	}()
	<-done
	return res, err
}

func diffOutcome(res string, err error) string {
	if err == nil {
		return "ok " + res
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return "errno " + unix.ErrnoName(errno)
	}
	return "error " + err.Error()
}

func (d *differential) pick(l []string) string { return l[d.r.IntN(len(l))] }

// dir picks a directory, the shallower ones more often.
func (d *differential) dir() string {
	return diffDirs[[]int{0, 0, 0, 1, 1, 2, 2, 3}[d.r.IntN(8)]]
}

func (d *differential) randPath() string { return d.dir() + d.pick(diffNames) }

func (d *differential) filePath() string { return d.dir() + d.pick(diffFiles) }

// attrPath is a path whose attributes a step changes: now and then the
// root, whose attributes no entry holds.
func (d *differential) attrPath() string {
	if d.r.IntN(10) == 0 {
		return "."
	}
	return d.randPath()
}

func (d *differential) anyOpen() bool {
	return slices.ContainsFunc(d.cur.native.fds[:], func(fd int) bool { return fd >= 0 })
}

// slot picks a descriptor slot, an open one when there is one.
func (d *differential) slot() int {
	var open []int
	for i, fd := range d.cur.native.fds {
		if fd >= 0 {
			open = append(open, i)
		}
	}
	if len(open) > 0 && d.r.IntN(8) != 0 {
		return open[d.r.IntN(len(open))]
	}
	return d.r.IntN(diffSlots)
}

func (d *differential) size() int {
	switch d.r.IntN(4) {
	case 0, 1:
		return 1 + d.r.IntN(1000)
	case 2:
		return d.r.IntN(70_000)
	default:
		return d.r.IntN(200_000)
	}
}

func (d *differential) offset() int64 { return int64(d.r.IntN(300_000)) }

// genOpen opens a file into a slot, closing what the slot held.
func (d *differential) genOpen() diffOp {
	p, s := d.filePath(), d.slot()
	if d.r.IntN(8) == 0 {
		p = d.randPath()
	}
	flags := []int{unix.O_RDONLY, unix.O_WRONLY, unix.O_RDWR}[d.r.IntN(3)]
	for _, b := range []struct {
		flag, in int
	}{{unix.O_CREAT, 3}, {unix.O_EXCL, 5}, {unix.O_TRUNC, 7}, {unix.O_APPEND, 3}} {
		if d.r.IntN(b.in) == 0 {
			flags |= b.flag
		}
	}
	if flags&unix.O_CREAT == 0 && d.r.IntN(2) == 0 {
		flags |= unix.O_CREAT
	}
	mode := uint32([]int{0o644, 0o600, 0o755}[d.r.IntN(3)])
	return diffOp{fmt.Sprintf("open(%s, %#o, %o) → slot %d", p, flags, mode, s), func(w *diffWorld) (string, error) {
		if w.fds[s] >= 0 {
			_ = unix.Close(w.fds[s])
			w.fds[s] = -1
		}
		w.stale[s] = false
		fd, err := unix.Open(w.path(p), flags|unix.O_CLOEXEC, mode)
		if err != nil {
			return "", err
		}
		w.fds[s] = fd
		return "", nil
	}}
}

// diffGen makes one kind of step; seq numbers the step, for the bytes it
// writes.
type diffGen func(d *differential, seq uint64) diffOp

// diffGens are the kinds of step, each with its weight in a draw of
// diffGenTotal. A seed reproduces its run only while this table, its order
// and the draws each generator makes stay as they are.
var diffGens = []struct {
	weight int
	gen    diffGen
}{
	{16, func(d *differential, _ uint64) diffOp { return d.genOpen() }},
	{14, (*differential).genWrite},
	{10, (*differential).genRead},
	{3, (*differential).genSeek},
	{4, (*differential).genTruncate},
	{3, (*differential).genFsync},
	{6, (*differential).genClose},
	{6, (*differential).genStat},
	{4, (*differential).genRemove},
	{5, (*differential).genMkdir},
	{6, (*differential).genRename},
	{3, (*differential).genLink},
	{3, (*differential).genSymlink},
	{2, (*differential).genReadlink},
	{2, (*differential).genChmod},
	{1, (*differential).genChown},
	{1, (*differential).genUtimens},
	{4, (*differential).genXattr},
	{3, (*differential).genReaddir},
	{1, (*differential).genFallocate},
	{2, (*differential).genMmapWrite},
	{1, (*differential).genCopyRange},
}

var diffGenTotal = func() int {
	n := 0
	for _, g := range diffGens {
		n += g.weight
	}
	return n
}()

func (d *differential) genOp() diffOp {
	d.seq++
	seq := uint64(d.seq)
	k := d.r.IntN(diffGenTotal)
	// With no descriptor open, most steps open one; the draw for that is
	// made only then.
	if k >= diffGens[0].weight && !d.anyOpen() && d.r.IntN(4) != 0 {
		return d.genOpen()
	}
	for _, g := range diffGens {
		if k < g.weight {
			return g.gen(d, seq)
		}
		k -= g.weight
	}
	panic("unreachable: k < diffGenTotal")
}

func (d *differential) genWrite(seq uint64) diffOp {
	s, n, at := d.slot(), d.size(), d.r.IntN(2) == 0
	off := d.offset()
	data := randBytes(seq, n)
	if !at {
		return diffOp{fmt.Sprintf("write(slot %d, %d bytes)", s, n), func(w *diffWorld) (string, error) {
			k, err := unix.Write(w.fds[s], data)
			return fmt.Sprint(k), err
		}}
	}
	return diffOp{fmt.Sprintf("pwrite(slot %d, %d bytes, at %d)", s, n, off), func(w *diffWorld) (string, error) {
		k, err := unix.Pwrite(w.fds[s], data, off)
		return fmt.Sprint(k), err
	}}
}

func (d *differential) genRead(uint64) diffOp {
	s, n, at, off := d.slot(), d.size(), d.r.IntN(2) == 0, d.offset()
	return diffOp{fmt.Sprintf("read(slot %d, %d bytes, at %d if %v)", s, n, off, at), func(w *diffWorld) (string, error) {
		buf := make([]byte, n)
		var k int
		var err error
		if at {
			k, err = unix.Pread(w.fds[s], buf, off)
		} else {
			k, err = unix.Read(w.fds[s], buf)
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d %s", k, cas.Sum(buf[:k]).Short()), nil
	}}
}

func (d *differential) genSeek(uint64) diffOp {
	s, off, whence := d.slot(), d.offset()-100_000, d.r.IntN(3)
	return diffOp{fmt.Sprintf("lseek(slot %d, %d, %d)", s, off, whence), func(w *diffWorld) (string, error) {
		var st unix.Stat_t
		if unix.Fstat(w.fds[s], &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			// A directory's offsets are the file system's own.
			return "a directory", nil
		}
		pos, err := unix.Seek(w.fds[s], off, whence)
		return fmt.Sprint(pos), err
	}}
}

func (d *differential) genTruncate(uint64) diffOp {
	size := d.offset()
	if d.r.IntN(2) == 0 {
		s := d.slot()
		return diffOp{fmt.Sprintf("ftruncate(slot %d, %d)", s, size), func(w *diffWorld) (string, error) {
			return "", unix.Ftruncate(w.fds[s], size)
		}}
	}
	p := d.randPath()
	return diffOp{fmt.Sprintf("truncate(%s, %d)", p, size), func(w *diffWorld) (string, error) {
		return "", unix.Truncate(w.path(p), size)
	}}
}

func (d *differential) genFsync(uint64) diffOp {
	s, data := d.slot(), d.r.IntN(2) == 0
	return diffOp{fmt.Sprintf("fsync(slot %d, data only %v)", s, data), func(w *diffWorld) (string, error) {
		if data {
			return "", unix.Fdatasync(w.fds[s])
		}
		return "", unix.Fsync(w.fds[s])
	}}
}

func (d *differential) genClose(uint64) diffOp {
	s := d.slot()
	return diffOp{fmt.Sprintf("close(slot %d)", s), func(w *diffWorld) (string, error) {
		fd := w.fds[s]
		w.fds[s] = -1
		return "", unix.Close(fd)
	}}
}

func (d *differential) genStat(uint64) diffOp {
	if d.r.IntN(2) == 0 {
		s := d.slot()
		return diffOp{fmt.Sprintf("fstat(slot %d)", s), func(w *diffWorld) (string, error) {
			var st unix.Stat_t
			if err := unix.Fstat(w.fds[s], &st); err != nil {
				return "", err
			}
			if w.stale[s] {
				st.Nlink = 0
			}
			return diffStat(&st), nil
		}}
	}
	p := d.randPath()
	return diffOp{fmt.Sprintf("lstat(%s)", p), func(w *diffWorld) (string, error) {
		var st unix.Stat_t
		if err := unix.Lstat(w.path(p), &st); err != nil {
			return "", err
		}
		return diffStat(&st), nil
	}}
}

func (d *differential) genRemove(uint64) diffOp {
	p := d.randPath()
	if d.r.IntN(4) != 0 {
		return diffOp{fmt.Sprintf("unlink(%s)", p), func(w *diffWorld) (string, error) { return "", unix.Unlink(w.path(p)) }}
	}
	return diffOp{fmt.Sprintf("rmdir(%s)", p), func(w *diffWorld) (string, error) { return "", unix.Rmdir(w.path(p)) }}
}

func (d *differential) genMkdir(uint64) diffOp {
	p, mode := d.dir()+d.pick(diffDirNames), uint32([]int{0o755, 0o700, 0o777}[d.r.IntN(3)])
	return diffOp{fmt.Sprintf("mkdir(%s, %o)", p, mode), func(w *diffWorld) (string, error) { return "", unix.Mkdir(w.path(p), mode) }}
}

func (d *differential) genRename(uint64) diffOp {
	from, to := d.randPath(), d.randPath()
	flags := []uint{0, 0, unix.RENAME_NOREPLACE, unix.RENAME_EXCHANGE}[d.r.IntN(4)]
	return diffOp{fmt.Sprintf("rename(%s, %s, %d)", from, to, flags), func(w *diffWorld) (string, error) {
		return "", unix.Renameat2(unix.AT_FDCWD, w.path(from), unix.AT_FDCWD, w.path(to), flags)
	}}
}

func (d *differential) genLink(uint64) diffOp {
	from, to := d.randPath(), d.filePath()
	return diffOp{fmt.Sprintf("link(%s, %s)", from, to), func(w *diffWorld) (string, error) {
		return "", unix.Link(w.path(from), w.path(to))
	}}
}

func (d *differential) genSymlink(uint64) diffOp {
	// Targets stay below the link's directory: a link out of the root
	// would resolve to different places in the two worlds.
	target, p := d.pick([]string{"f0", "f1", "d0", "e0/f2", "f3/x"}), d.filePath()
	return diffOp{fmt.Sprintf("symlink(%s, %s)", target, p), func(w *diffWorld) (string, error) {
		return "", unix.Symlink(target, w.path(p))
	}}
}

func (d *differential) genReadlink(uint64) diffOp {
	p := d.randPath()
	return diffOp{fmt.Sprintf("readlink(%s)", p), func(w *diffWorld) (string, error) {
		buf := make([]byte, 256)
		n, err := unix.Readlink(w.path(p), buf)
		return string(buf[:max(n, 0)]), err
	}}
}

func (d *differential) genChmod(uint64) diffOp {
	p, mode := d.attrPath(), uint32(d.r.IntN(0o10000))
	return diffOp{fmt.Sprintf("chmod(%s, %o)", p, mode), func(w *diffWorld) (string, error) { return "", unix.Chmod(w.path(p), mode) }}
}

func (d *differential) genChown(uint64) diffOp {
	p := d.attrPath()
	uid, gid := []int{-1, 0, 1000, 1001}[d.r.IntN(4)], []int{-1, 0, 1000, 1002}[d.r.IntN(4)]
	if uid == -1 && gid == -1 {
		// chown(-1, -1) reaches no FUSE daemon (docs/ARCHITECTURE.md,
		// Known limits).
		gid = 1002
	}
	follow := d.r.IntN(2) == 0
	return diffOp{fmt.Sprintf("chown(%s, %d, %d, follow %v)", p, uid, gid, follow), func(w *diffWorld) (string, error) {
		if follow {
			return "", unix.Chown(w.path(p), uid, gid)
		}
		return "", unix.Lchown(w.path(p), uid, gid)
	}}
}

func (d *differential) genUtimens(uint64) diffOp {
	p := d.attrPath()
	ts := []unix.Timespec{{Sec: int64(d.r.IntN(1 << 31)), Nsec: int64(d.r.IntN(1e9))}, {Sec: int64(d.r.IntN(1 << 31)), Nsec: int64(d.r.IntN(1e9))}}
	flags := []int{0, unix.AT_SYMLINK_NOFOLLOW}[d.r.IntN(2)]
	return diffOp{fmt.Sprintf("utimensat(%s, %v, %d)", p, ts, flags), func(w *diffWorld) (string, error) {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, w.path(p), ts, flags); err != nil {
			return "", err
		}
		var st unix.Stat_t
		if err := unix.Fstatat(unix.AT_FDCWD, w.path(p), &st, flags); err != nil {
			return "", err
		}
		return fmt.Sprintf("atime %d.%09d mtime %d.%09d", st.Atim.Sec, st.Atim.Nsec, st.Mtim.Sec, st.Mtim.Nsec), nil
	}}
}

func (d *differential) genXattr(seq uint64) diffOp {
	p, attr := d.attrPath(), d.pick([]string{"user.a", "user.b"})
	switch d.r.IntN(4) {
	case 0:
		value, flags := fmt.Sprintf("v%d", seq), []int{0, unix.XATTR_CREATE, unix.XATTR_REPLACE}[d.r.IntN(3)]
		return diffOp{fmt.Sprintf("setxattr(%s, %s, %s, %d)", p, attr, value, flags), func(w *diffWorld) (string, error) {
			return "", unix.Setxattr(w.path(p), attr, []byte(value), flags)
		}}
	case 1:
		return diffOp{fmt.Sprintf("getxattr(%s, %s)", p, attr), func(w *diffWorld) (string, error) {
			buf := make([]byte, 256)
			n, err := unix.Getxattr(w.path(p), attr, buf)
			return string(buf[:max(n, 0)]), err
		}}
	case 2:
		return diffOp{fmt.Sprintf("removexattr(%s, %s)", p, attr), func(w *diffWorld) (string, error) {
			return "", unix.Removexattr(w.path(p), attr)
		}}
	default:
		return diffOp{fmt.Sprintf("listxattr(%s)", p), func(w *diffWorld) (string, error) {
			return diffXattrs(w.path(p), false)
		}}
	}
}

func (d *differential) genReaddir(uint64) diffOp {
	dir := d.pick(diffDirs)
	return diffOp{fmt.Sprintf("readdir(%q)", dir), func(w *diffWorld) (string, error) {
		ents, err := os.ReadDir(w.path(dir))
		var names []string
		for _, e := range ents {
			names = append(names, e.Name()+":"+e.Type().String())
		}
		return strings.Join(names, " "), err
	}}
}

func (d *differential) genFallocate(uint64) diffOp {
	s, off, n := d.slot(), d.offset(), int64(d.size())
	mode := uint32([]int{0, unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_ZERO_RANGE}[d.r.IntN(4)])
	return diffOp{fmt.Sprintf("fallocate(slot %d, %#x, %d, %d)", s, mode, off, n), func(w *diffWorld) (string, error) {
		return "", unix.Fallocate(w.fds[s], mode, off, n)
	}}
}

// genMmapWrite writes through a shared writable mapping, from another
// process (a fault on the mount from the daemon's own process could
// deadlock it), mapped through an O_APPEND descriptor half of the time:
// the pages still go where they are mapped.
func (d *differential) genMmapWrite(seq uint64) diffOp {
	p, off, n := d.filePath(), d.r.IntN(200_000), 1+d.r.IntN(20_000)
	args := []string{fmt.Sprint(off), fmt.Sprint(n), fmt.Sprint(seq)}
	if d.r.IntN(2) == 0 {
		args = append(args, "append")
	}
	return diffOp{fmt.Sprintf("mmap write(%s, %d bytes at %d, %v)", p, n, off, args[3:]), func(w *diffWorld) (string, error) {
		cmd := helper(context.Background(), "mmap-at", append([]string{w.path(p)}, args...)...)
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}}
}

func (d *differential) genCopyRange(uint64) diffOp {
	in, out, offIn, offOut, n := d.slot(), d.slot(), d.offset(), d.offset(), d.size()
	return diffOp{fmt.Sprintf("copy_file_range(slot %d at %d, slot %d at %d, %d)", in, offIn, out, offOut, n), func(w *diffWorld) (string, error) {
		ri, ro := offIn, offOut
		k, err := unix.CopyFileRange(w.fds[in], &ri, w.fds[out], &ro, n, 0)
		return fmt.Sprint(k), err
	}}
}

// diffStat is what a stat must agree on: not times (a write sets them
// from each world's clock), inode numbers, or a directory's size and
// blocks, which are the file system's own.
func diffStat(st *unix.Stat_t) string {
	s := fmt.Sprintf("mode %o owner %d:%d nlink %d", st.Mode, st.Uid, st.Gid, st.Nlink)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		s += fmt.Sprintf(" size %d", st.Size)
	}
	return s
}

func diffXattrs(p string, nofollow bool) (string, error) {
	list := unix.Listxattr
	if nofollow {
		list = unix.Llistxattr
	}
	buf := make([]byte, 4096)
	n, err := list(p, buf)
	if err != nil {
		return "", err
	}
	var names []string
	for _, x := range strings.Split(string(buf[:n]), "\x00") {
		if strings.HasPrefix(x, "user.") {
			names = append(names, x)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ","), nil
}

// diffDump describes every entry below root: type, mode, owner, size,
// content, link target, user xattrs, and which names are hard links of
// one file.
func diffDump(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	first := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p) // "." is the root: its attributes count too
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := diffStat(&st)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if f, ok := first[st.Ino]; ok {
				desc += " link of " + f
			} else {
				first[st.Ino] = rel
			}
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + cas.Sum(b).Short()
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + target
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			x, err := diffXattrs(p, true)
			if err != nil {
				return err
			}
			desc += " xattrs " + x
		}
		out[rel] = desc
		return nil
	})
	require.NoError(t, err, "dump %s", root)
	return out
}

// checkpoint compares every pair's trees, then captures, forks, restores
// or remounts one of them now and then.
func (d *differential) checkpoint() {
	t := d.t
	for _, p := range d.pairs {
		require.Equal(t, diffDump(t, p.native.root), diffDump(t, p.mount.root), "trees of %s differ%s", p.name, d.history())
	}
	ctx := context.Background()
	p := d.pairs[d.r.IntN(len(d.pairs))]
	switch k := d.r.IntN(6); {
	case k < 3:
		want := diffDump(t, p.native.root)
		_, id, err := d.e.Capture(ctx, p.name, "differential", nil)
		require.NoError(t, err)
		copyDir := filepath.Join(d.saved, fmt.Sprint(len(d.snaps)))
		out, err := exec.Command("cp", "-a", p.native.root, copyDir).CombinedOutput()
		require.NoError(t, err, "%s", out)
		d.snaps = append(d.snaps, id)
		d.note(fmt.Sprintf("%s: capture %s (copy %d)", p.name, id, len(d.snaps)-1))
		require.Equal(t, want, diffDump(t, mountSnapshot(t, d.e, id)), "snapshot %s of %s differs from the tree at its capture%s", id, p.name, d.history())
		// What homefs's own checks say of it: fsck and a full export.
		verifySnapshot(t, d.e, d.verifier, id)
		if k == 0 && len(d.pairs) <= diffMaxForks {
			name := fmt.Sprintf("fork%d", len(d.pairs))
			_, err := d.e.Fork(ctx, id, name)
			require.NoError(t, err)
			nativeRoot := filepath.Join(t.TempDir(), name)
			out, err := exec.Command("cp", "-a", copyDir, nativeRoot).CombinedOutput()
			require.NoError(t, err, "%s", out)
			d.note(fmt.Sprintf("fork %s of %s", name, id))
			f := d.addPair(name, nativeRoot)
			require.Equal(t, want, diffDump(t, f.mount.root), "fork %s differs from its snapshot%s", name, d.history())
		}
	case k == 3 && len(d.snaps) > 0:
		// Any snapshot, also one of another session of the family.
		i := d.r.IntN(len(d.snaps))
		d.note(fmt.Sprintf("%s: restore %s (copy %d)", p.name, d.snaps[i], i))
		// Open files keep their content, out of the tree: natively, the
		// old tree moves aside with them.
		for _, w := range []*diffWorld{p.native, p.mount} {
			for s, fd := range w.fds {
				w.stale[s] = w.stale[s] || fd >= 0
			}
		}
		require.NoError(t, d.e.Restore(ctx, p.name, d.snaps[i]))
		d.asides++
		require.NoError(t, os.Rename(p.native.root, filepath.Join(d.saved, fmt.Sprintf("aside%d", d.asides))))
		out, err := exec.Command("cp", "-a", filepath.Join(d.saved, fmt.Sprint(i)), p.native.root).CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, diffDump(t, p.native.root), diffDump(t, p.mount.root), "restored tree of %s differs%s", p.name, d.history())
	case k == 4:
		d.note(p.name + ": remount")
		p.native.closeAll()
		p.mount.closeAll()
		require.NoError(t, p.m.Unmount())
		d.mountPair(p)
		require.Equal(t, diffDump(t, p.native.root), diffDump(t, p.mount.root), "tree of %s differs after a remount%s", p.name, d.history())
	}
}
