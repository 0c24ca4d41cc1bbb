package fusefs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
)

// TestNeedsAtime is relatime's rule (Linux's relatime_need_update).
func TestNeedsAtime(t *testing.T) {
	const now, hour = int64(100 * atimeRefresh), int64(3600e9)
	for _, tc := range []struct {
		what                string
		atime, mtime, ctime int64
		want                bool
	}{
		{"never read since the change", now - 2*hour, now - hour, now - hour, true},
		{"read at the change", now - hour, now - hour, now - hour, true},
		{"changed status since the read", now - hour, now - 3*hour, now - 2*hour/3, true},
		{"read since the change", now - hour, now - 2*hour, now - 2*hour, false},
		{"read a day ago", now - atimeRefresh, now - 2*atimeRefresh, now - 2*atimeRefresh, true},
		{"read almost a day ago", now - atimeRefresh + 1, now - 2*atimeRefresh, now - 2*atimeRefresh, false},
		{"atime in the future", now + hour, now - hour, now - hour, false},
	} {
		if got := needsAtime(tc.atime, tc.mtime, tc.ctime, now); got != tc.want {
			t.Errorf("%s: needsAtime = %v, want %v", tc.what, got, tc.want)
		}
	}
}

func atimeOf(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Stat_t
	require.NoError(t, unix.Lstat(path, &st))
	return st.Atim.Nano()
}

// appendTo appends s to path through a write-only appender (which
// passthrough may serve).
func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString(s)
	require.NoError(t, err)
	require.NoError(t, f.Close())
}

// readNoAtime reads path through an O_NOATIME descriptor.
func readNoAtime(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	_, err = unix.Read(fd, buf)
	require.NoError(t, err)
}

// atimeStep is an operation and whether it moves path's atime.
type atimeStep struct {
	what string
	do   func()
	path string
	want bool
}

// runAtimeSteps runs steps in order, checking each one's effect on the
// atime that stat shows at once.
func runAtimeSteps(t *testing.T, steps []atimeStep) {
	t.Helper()
	for _, step := range steps {
		before := atimeOf(t, step.path)
		// The kernel's clock for timestamps: passthrough reads are dated
		// by it.
		var coarse unix.Timespec
		require.NoError(t, unix.ClockGettime(unix.CLOCK_REALTIME_COARSE, &coarse))
		step.do()
		after := atimeOf(t, step.path)
		if !step.want {
			require.Equal(t, before, after, "%s: atime moved", step.what)
			continue
		}
		require.NotEqual(t, before, after, "%s: atime did not move", step.what)
		require.GreaterOrEqual(t, after, coarse.Nano(), "%s: atime %d is before the read", step.what, after)
		var st unix.Stat_t
		require.NoError(t, unix.Lstat(step.path, &st))
		require.Greater(t, after, st.Mtim.Nano(), "%s: atime not after mtime", step.what)
		require.Greater(t, after, st.Ctim.Nano(), "%s: atime not after ctime", step.what)
	}
}

// TestRelatime: reads set atimes as relatime does on ext4, and stat sees
// the new one at once, whichever way the reads are served: by the daemon
// (and from the pages the kernel kept), or through passthrough (a staged
// file's reader); a write, a chmod and a read through O_NOATIME too. A
// readlink and a listing do the same for a symlink and a directory.
func TestRelatime(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	d := m.Dir()
	served := filepath.Join(d, "served")
	staged := filepath.Join(d, "staged")
	// Kept open, the writer keeps the file staged: every reader is
	// passed through to its staging file.
	wo, err := os.OpenFile(staged, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	defer wo.Close()
	for _, route := range []struct {
		path  string
		write func()
	}{
		// O_RDWR, never staged, and closed: the kernel keeps the pages a
		// read cached while nothing changes the file.
		{served, func() {
			f, err := os.OpenFile(served, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
			require.NoError(t, err)
			_, err = f.Write([]byte("data "))
			require.NoError(t, err)
			require.NoError(t, f.Close())
		}},
		{staged, func() {
			_, err := wo.Write([]byte("data "))
			require.NoError(t, err)
		}},
	} {
		p, write := route.path, route.write
		write()
		name := filepath.Base(p) + ": "
		runAtimeSteps(t, []atimeStep{
			{name + "first read after the write", func() { read(t, p) }, p, true},
			{name + "second read", func() { read(t, p) }, p, false},
			{name + "a write", write, p, false},
			{name + "read after a write", func() { read(t, p) }, p, true},
			{name + "read again", func() { read(t, p) }, p, false},
			{name + "chmod", func() { require.NoError(t, os.Chmod(p, 0o640)) }, p, false},
			{name + "read after a chmod", func() { read(t, p) }, p, true},
			{name + "a write, then a read through O_NOATIME", func() { write(); readNoAtime(t, p) }, p, false},
			{name + "then a read", func() { read(t, p) }, p, true},
		})
	}

	require.NoError(t, os.Mkdir(filepath.Join(d, "dir"), 0o755))
	require.NoError(t, os.Symlink("served", filepath.Join(d, "link")))
	link, dir := filepath.Join(d, "link"), filepath.Join(d, "dir")
	readlink := func() {
		_, err := os.Readlink(link)
		require.NoError(t, err)
	}
	list := func() {
		_, err := os.ReadDir(dir)
		require.NoError(t, err)
	}
	runAtimeSteps(t, []atimeStep{
		{"readlink", readlink, link, true},
		{"readlink again", readlink, link, false},
		{"listing after a create in it", func() { write(t, filepath.Join(dir, "x"), "x"); list() }, dir, true},
		{"listing again", list, dir, false},
	})
}

// TestAtimeOptions: a noatime mount (shown as such in the mount table) and
// a read-only one set no atime; a reader who is not the owner sets it as
// any reader does.
func TestAtimeOptions(t *testing.T) {
	t.Parallel()
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "s", "", MountOptions{AllowOther: os.Geteuid() == 0})
	noatime := MountForTest(t, e, "n", "", MountOptions{NoAtime: true})
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	found := false
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == noatime.Dir() {
			require.Contains(t, strings.Split(f[5], ","), "noatime", line)
			found = true
		}
	}
	require.True(t, found, "%s not in the mount table", noatime.Dir())

	f := filepath.Join(noatime.Dir(), "f")
	write(t, f, "x")
	require.NoError(t, os.Mkdir(filepath.Join(noatime.Dir(), "d"), 0o755))
	before, dir := atimeOf(t, f), atimeOf(t, filepath.Join(noatime.Dir(), "d"))
	read(t, f)
	_, err = os.ReadDir(filepath.Join(noatime.Dir(), "d"))
	require.NoError(t, err)
	require.Equal(t, before, atimeOf(t, f), "noatime: read")
	require.Equal(t, dir, atimeOf(t, filepath.Join(noatime.Dir(), "d")), "noatime: listing")

	write(t, filepath.Join(m.Dir(), "ro"), "x")
	ro := MountForTest(t, e, "s", "", MountOptions{ReadOnly: true})
	before = atimeOf(t, filepath.Join(ro.Dir(), "ro"))
	read(t, filepath.Join(ro.Dir(), "ro"))
	require.Equal(t, before, atimeOf(t, filepath.Join(ro.Dir(), "ro")), "read-only mount")

	if os.Geteuid() != 0 {
		return
	}
	needTool(t, "setpriv")
	for p := filepath.Dir(m.Dir()); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	pub := filepath.Join(m.Dir(), "public")
	write(t, pub, "p")
	before = atimeOf(t, pub)
	out, err := asNobody(t, m.Dir(), "cat public")
	require.NoError(t, err, out)
	require.Greater(t, atimeOf(t, pub), before, "a read by another user")
	out, err = asNobody(t, m.Dir(), "cat public")
	require.NoError(t, err, out)
}

// TestAtimeStored: an atime a read set is stored, lazily: it makes no
// flush due and leaves the journal's run alone, and a capture, and the
// flush of an engine's close, store it (a snapshot and the next daemon
// show it). Reads that leave atimes alone change no root.
func TestAtimeStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := cas.NewMemory()
	dir := t.TempDir()
	newEngine := func() *Engine {
		return New(store, catalog.New(store), Options{StoreDir: dir, FlushInterval: -1,
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	}
	e := newEngine()
	_, err := e.Catalog().CreateSession(ctx, "s", "")
	require.NoError(t, err)
	m, err := e.Mount(ctx, "s", "", t.TempDir(), MountOptions{})
	require.NoError(t, err)
	f := filepath.Join(m.Dir(), "f")
	// Written through the daemon (O_RDWR): a staged file's release may
	// come after the sync and change it again.
	w, err := os.Create(f)
	require.NoError(t, err)
	_, err = w.WriteString("hello")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.NoError(t, e.Sync(ctx, "s"))

	read(t, f)
	want := atimeOf(t, f)
	s := m.sess
	s.dirtyMu.Lock()
	dirty, atimes, meta := len(s.dirty), len(s.atimes), s.metaDirty
	s.dirtyMu.Unlock()
	require.Zero(t, dirty, "an atime makes no flush due")
	require.Equal(t, 1, atimes)
	require.False(t, meta, "an atime leaves the journal's run alone")

	snap1, _, err := e.Capture(ctx, "s", "read", nil)
	require.NoError(t, err)
	read(t, f) // relatime leaves it: read since the last change
	snap2, id, err := e.Capture(ctx, "s", "read again", nil)
	require.NoError(t, err)
	require.Equal(t, snap1.Root, snap2.Root, "a read that set no atime changed the tree")
	require.Equal(t, want, atimeOf(t, filepath.Join(mountSnapshot(t, e, id), "f")), "in a snapshot")

	appendTo(t, f, "!")
	read(t, f)
	want = atimeOf(t, f)
	require.NoError(t, e.Close(ctx))
	e = newEngine()
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	m2 := MountForTest(t, e, "s", "", MountOptions{})
	require.Equal(t, want, atimeOf(t, filepath.Join(m2.Dir(), "f")), "after a restart")
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(filepath.Join(m2.Dir(), "f"), &st))
	require.Greater(t, st.Atim.Nano(), st.Mtim.Nano())
}
