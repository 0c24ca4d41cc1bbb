package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

func TestLookup(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	d := m.Dir()
	write(t, filepath.Join(d, "a/b/file"), "x")
	require.NoError(t, os.Symlink("b", filepath.Join(d, "a/link")))
	long := strings.Repeat("n", manifest.MaxNameLen+1)
	for _, tc := range []struct {
		path string
		want syscall.Errno
		mode uint32
	}{
		{"a", 0, syscall.S_IFDIR},
		{"a/b", 0, syscall.S_IFDIR},
		{"a/b/file", 0, syscall.S_IFREG},
		{"a/link", 0, syscall.S_IFLNK},
		{"a/link/file", 0, syscall.S_IFREG}, // the kernel follows, inside the mount
		{"missing", syscall.ENOENT, 0},
		{"a/b/file/x", syscall.ENOTDIR, 0},
		{"a/missing/x", syscall.ENOENT, 0},
		{long, syscall.ENAMETOOLONG, 0},
	} {
		t.Run(tc.path, func(t *testing.T) {
			var st syscall.Stat_t
			err := syscall.Lstat(filepath.Join(d, tc.path), &st)
			if tc.want != 0 {
				requireErrno(t, err, tc.want)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.mode, st.Mode&syscall.S_IFMT)
		})
	}
}

func TestSetattr(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := m.Dir()
	p := filepath.Join(d, "f")
	write(t, p, "hello")

	require.NoError(t, unix.Chmod(p, 0o4751)) // os.Chmod would drop the high bits
	require.Equal(t, uint32(syscall.S_IFREG|0o4751), stat(t, p).Mode)
	require.NoError(t, os.Chmod(p, 0o640))
	require.NoError(t, os.Chown(p, 1000, 2000))
	st := stat(t, p)
	require.Equal(t, uint32(1000), st.Uid)
	require.Equal(t, uint32(2000), st.Gid)
	require.Equal(t, uint32(syscall.S_IFREG|0o640), st.Mode)

	// Truncate up and down, within one chunk and across chunks: cut
	// bytes never come back.
	require.NoError(t, os.Truncate(p, 100))
	require.Equal(t, "hello"+strings.Repeat("\x00", 95), read(t, p))
	require.NoError(t, os.Truncate(p, 2))
	require.NoError(t, os.Truncate(p, 10))
	require.Equal(t, "he"+strings.Repeat("\x00", 8), read(t, p))

	big := randBytes(1, 200<<10)
	q := filepath.Join(d, "big")
	require.NoError(t, os.WriteFile(q, big, 0o644))
	for round := range 2 {
		if round == 1 {
			// Again with the content stored rather than buffered.
			require.NoError(t, os.WriteFile(q, big, 0o644))
			require.NoError(t, e.Sync(context.Background(), "s"))
		}
		require.NoError(t, os.Truncate(q, 70000))
		require.NoError(t, os.Truncate(q, int64(len(big))))
		want := append(slices.Clone(big[:70000]), make([]byte, len(big)-70000)...)
		got, err := os.ReadFile(q)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "round %d", round)
		require.NoError(t, os.Truncate(q, 65536))
		require.NoError(t, os.Truncate(q, 65536+10))
		got, err = os.ReadFile(q)
		require.NoError(t, err)
		require.Equal(t, big[:65536], got[:65536])
		require.Equal(t, make([]byte, 10), got[65536:])
	}

	// utimens with nanoseconds, UTIME_OMIT and UTIME_NOW.
	at := unix.Timespec{Sec: 1_000_000_000, Nsec: 123_456_789}
	mt := unix.Timespec{Sec: 1_100_000_000, Nsec: 987_654_321}
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{at, mt}, 0))
	st = stat(t, p)
	require.Equal(t, at, unix.Timespec(st.Atim))
	require.Equal(t, mt, unix.Timespec(st.Mtim))
	before := time.Now()
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Nsec: unix.UTIME_NOW}}, 0))
	st = stat(t, p)
	require.Equal(t, at, unix.Timespec(st.Atim), "UTIME_OMIT changed atime")
	require.WithinDuration(t, before, time.Unix(st.Mtim.Unix()), 5*time.Second)
	mt2 := unix.Timespec{Sec: 1_200_000_000, Nsec: 1}
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{{Nsec: unix.UTIME_NOW}, mt2}, 0))
	st = stat(t, p)
	require.Equal(t, mt2, unix.Timespec(st.Mtim))
	require.WithinDuration(t, before, time.Unix(st.Atim.Unix()), 5*time.Second)

	// futimens on an open descriptor, as Codex does after opening a rollout.
	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", f.Fd()), []unix.Timespec{mt, mt}, 0))
	require.NoError(t, f.Close())
	require.Equal(t, mt, unix.Timespec(stat(t, p).Mtim))

	// Attributes, nanoseconds included, survive a capture.
	_, snap := captureMount(t, e, "s")
	st = stat(t, filepath.Join(snap, "f"))
	require.Equal(t, mt, unix.Timespec(st.Mtim))
	require.Equal(t, uint32(syscall.S_IFREG|0o640), st.Mode)
	require.Equal(t, uint32(1000), st.Uid)
}

// readNames lists a directory in the order the kernel returns.
func readNames(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	require.NoError(t, err)
	return names
}

func TestReaddir(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	d := filepath.Join(m.Dir(), "d")
	require.NoError(t, os.Mkdir(d, 0o755))
	r := rand.New(rand.NewPCG(7, 7))
	var want []string
	for _, i := range r.Perm(300) {
		// Long names so that a listing takes several kernel requests.
		name := fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 40))
		want = append(want, name)
		write(t, filepath.Join(d, name), "")
	}
	slices.Sort(want)
	first := readNames(t, d)
	require.Equal(t, want, first, "sorted")
	require.Equal(t, first, readNames(t, d), "stable")

	// Change the directory while a listing is half-way: names present
	// throughout appear exactly once; rewinding shows the new state.
	f, err := os.Open(d)
	require.NoError(t, err)
	defer f.Close()
	head, err := f.Readdirnames(10)
	require.NoError(t, err)
	removed := map[string]bool{}
	for _, name := range want[150:170] {
		require.NoError(t, os.Remove(filepath.Join(d, name)))
		removed[name] = true
	}
	added := map[string]bool{}
	for i := range 20 {
		name := fmt.Sprintf("%03d-new", 500+i)
		write(t, filepath.Join(d, name), "")
		added[name] = true
	}
	rest, err := f.Readdirnames(-1)
	require.NoError(t, err)
	seen := map[string]int{}
	for _, name := range append(head, rest...) {
		seen[name]++
	}
	for name, k := range seen {
		require.Equal(t, 1, k, "%s listed %d times", name, k)
		require.True(t, slices.Contains(want, name) || added[name], "unknown name %s", name)
	}
	for _, name := range want {
		if !removed[name] {
			require.Equal(t, 1, seen[name], "%s missing", name)
		}
	}
	_, err = f.Seek(0, io.SeekStart)
	require.NoError(t, err)
	again, err := f.Readdirnames(-1)
	require.NoError(t, err)
	now := readNames(t, d)
	require.Equal(t, now, again, "rewinddir shows the current directory")
	require.Len(t, now, 300)
	require.True(t, slices.IsSorted(now))
}

func TestCreate(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	p := filepath.Join(m.Dir(), "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	require.NoError(t, err)
	_, err = f.WriteString("0123456789")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.Equal(t, uint32(syscall.S_IFREG|0o600), stat(t, p).Mode)

	_, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	requireErrno(t, err, syscall.EEXIST)

	f, err = os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("x"), 0)
	require.Error(t, err) // Go refuses WriteAt in append mode
	_, err = unix.Pwrite(int(f.Fd()), []byte("AB"), 0)
	require.NoError(t, err) // Linux appends regardless of the offset
	require.NoError(t, f.Close())
	require.Equal(t, "0123456789AB", read(t, p))

	// Two append descriptors interleave without losing bytes.
	f1, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	f2, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	for range 5 {
		_, err = f1.WriteString("1")
		require.NoError(t, err)
		_, err = f2.WriteString("2")
		require.NoError(t, err)
	}
	require.NoError(t, f1.Close())
	require.NoError(t, f2.Close())
	require.Equal(t, "0123456789AB1212121212", read(t, p))

	f, err = os.OpenFile(p, os.O_RDWR|os.O_TRUNC, 0)
	require.NoError(t, err)
	st, err := f.Stat()
	require.NoError(t, err)
	require.Zero(t, st.Size())
	require.NoError(t, f.Close())
	require.Equal(t, "", read(t, p))

	// mknod of a regular file works (special files: special_test.go).
	require.NoError(t, unix.Mknod(filepath.Join(m.Dir(), "plain"), syscall.S_IFREG|0o644, 0))
	st, err = os.Stat(filepath.Join(m.Dir(), "plain"))
	require.NoError(t, err)
	require.True(t, st.Mode().IsRegular())
}

func TestReadWrite(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := m.Dir()

	// Sparse: a write at 10 MiB into an empty file.
	p := filepath.Join(d, "sparse")
	f, err := os.Create(p)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte("end"), 10<<20)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Len(t, b, 10<<20+3)
	require.True(t, isZero(b[:10<<20]))
	require.Equal(t, "end", string(b[10<<20:]))

	// Writes spanning chunk boundaries.
	q := filepath.Join(d, "span")
	require.NoError(t, os.WriteFile(q, nil, 0o644))
	f, err = os.OpenFile(q, os.O_RDWR, 0)
	require.NoError(t, err)
	span := randBytes(2, 3*manifest.ChunkSize+100)
	_, err = f.WriteAt(span, manifest.ChunkSize-50)
	require.NoError(t, err)
	got := make([]byte, len(span))
	_, err = f.ReadAt(got, manifest.ChunkSize-50)
	require.NoError(t, err)
	require.True(t, bytes.Equal(span, got))
	require.NoError(t, f.Close())

	// A random mix of writes and truncations against a model.
	r := rand.New(rand.NewPCG(3, 3))
	model := []byte{}
	mp := filepath.Join(d, "model")
	f, err = os.Create(mp)
	require.NoError(t, err)
	defer f.Close()
	for step := range 300 {
		switch r.IntN(10) {
		case 0:
			size := r.IntN(5 * manifest.ChunkSize)
			require.NoError(t, f.Truncate(int64(size)))
			if size < len(model) {
				model = model[:size]
			} else {
				model = append(model, make([]byte, size-len(model))...)
			}
		case 1:
			require.NoError(t, e.Sync(context.Background(), "s"))
		default:
			off := r.IntN(5 * manifest.ChunkSize)
			data := randBytes(uint64(step), 1+r.IntN(2*manifest.ChunkSize))
			_, err := f.WriteAt(data, int64(off))
			require.NoError(t, err)
			if end := off + len(data); end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], data)
		}
		if step%25 == 0 {
			got, err := os.ReadFile(mp)
			require.NoError(t, err)
			require.True(t, bytes.Equal(model, got), "step %d", step)
		}
	}
	fm := forkMount(t, e, "s", "model-fork")
	got, err = os.ReadFile(filepath.Join(fm.Dir(), "model"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(model, got), "forked copy")
	b, err = os.ReadFile(filepath.Join(fm.Dir(), "sparse"))
	require.NoError(t, err)
	require.Len(t, b, 10<<20+3)
	require.Equal(t, "end", string(b[10<<20:]))
}

// TestLargeFiles writes files well over the spill threshold, sequentially
// and at random offsets, and reads them back live and from a fork.
func TestLargeFiles(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := m.Dir()
	seq := randBytes(4, 12<<20+12345)
	p := filepath.Join(d, "seq")
	f, err := os.Create(p)
	require.NoError(t, err)
	for off := 0; off < len(seq); off += 1 << 20 {
		_, err := f.Write(seq[off:min(off+1<<20, len(seq))])
		require.NoError(t, err)
	}
	require.NoError(t, f.Close())
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(seq, got))

	// Random 100 KiB writes over 10 MiB, buffered far past the threshold.
	model := make([]byte, 10<<20)
	r := rand.New(rand.NewPCG(5, 5))
	q := filepath.Join(d, "random")
	f, err = os.Create(q)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(int64(len(model))))
	for i := range 200 {
		off := r.IntN(len(model) - 100<<10)
		data := randBytes(uint64(100+i), 100<<10)
		_, err := f.WriteAt(data, int64(off))
		require.NoError(t, err)
		copy(model[off:], data)
	}
	require.NoError(t, f.Close())
	got, err = os.ReadFile(q)
	require.NoError(t, err)
	require.True(t, bytes.Equal(model, got))

	fm := forkMount(t, e, "s", "large-fork")
	got, err = os.ReadFile(filepath.Join(fm.Dir(), "seq"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(seq, got))
	got, err = os.ReadFile(filepath.Join(fm.Dir(), "random"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(model, got))
}

func TestFsync(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		sync func(f *os.File) error
	}{
		{"fsync", func(f *os.File) error { return f.Sync() }},
		{"fdatasync", func(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }},
		{"dirfsync", func(*os.File) error {
			d, err := os.Open(m.Dir())
			if err != nil {
				return err
			}
			defer d.Close()
			return d.Sync()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(m.Dir(), tc.name)
			f, err := os.Create(p)
			require.NoError(t, err)
			_, err = f.WriteString(tc.name)
			require.NoError(t, err)
			require.NoError(t, tc.sync(f))
			if tc.name == "dirfsync" {
				// A directory's fsync flushes: the session head now names a
				// tree holding the file.
				h, err := e.Catalog().Head(ctx, "s")
				require.NoError(t, err)
				require.Len(t, chunkRefs(t, e.store, h.Root, tc.name), 1)
				require.NoError(t, f.Close())
				return
			}
			// The journal holds the file's create and its bytes, synced:
			// the durable head and the journal replayed hold the file.
			j := m.sess.journal
			j.mu.Lock()
			unsynced, path, gen := j.unsynced, j.path, j.gen
			j.mu.Unlock()
			require.False(t, unsynced, "the journal is synced")
			h, err := e.Catalog().Head(ctx, "s")
			require.NoError(t, err)
			require.Equal(t, h.Gen, gen, "the journal applies to the durable head")
			jf, err := os.Open(path)
			require.NoError(t, err)
			_, recs, err := readJournal(jf)
			jf.Close()
			require.NoError(t, err)
			var created, wrote bool
			for _, r := range recs {
				created = created || r.kind == recCreate && r.name == tc.name
				wrote = wrote || created && r.kind == recWrite && string(r.data) == tc.name
			}
			require.True(t, created && wrote, "create and write records of %s: %+v", tc.name, recs)
			require.NoError(t, f.Close()) // flush
		})
	}
}

func TestMkdirRmdir(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	d := m.Dir()
	require.NoError(t, os.Mkdir(filepath.Join(d, "a"), 0o750))
	require.Equal(t, uint32(syscall.S_IFDIR|0o750), stat(t, filepath.Join(d, "a")).Mode)
	requireErrno(t, os.Mkdir(filepath.Join(d, "a"), 0o755), syscall.EEXIST)
	require.NoError(t, os.Mkdir(filepath.Join(d, "a/b"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(d, "a/c"), 0o755))
	require.Equal(t, uint64(4), uint64(stat(t, filepath.Join(d, "a")).Nlink))
	write(t, filepath.Join(d, "a/b/f"), "x")
	requireErrno(t, syscall.Rmdir(filepath.Join(d, "a/b")), syscall.ENOTEMPTY)
	requireErrno(t, syscall.Rmdir(filepath.Join(d, "a/b/f")), syscall.ENOTDIR)
	requireErrno(t, syscall.Unlink(filepath.Join(d, "a/b")), syscall.EISDIR)
	require.NoError(t, os.Remove(filepath.Join(d, "a/b/f")))
	require.NoError(t, syscall.Rmdir(filepath.Join(d, "a/b")))
	require.Equal(t, uint64(3), uint64(stat(t, filepath.Join(d, "a")).Nlink))
	require.NoError(t, os.RemoveAll(filepath.Join(d, "a")))
	_, err := os.Stat(filepath.Join(d, "a"))
	requireErrno(t, err, syscall.ENOENT)

	// A process may sit in a removed directory; creating there fails.
	require.NoError(t, os.Mkdir(filepath.Join(d, "gone"), 0o755))
	dirFd, err := unix.Open(filepath.Join(d, "gone"), unix.O_DIRECTORY|unix.O_RDONLY, 0)
	require.NoError(t, err)
	defer unix.Close(dirFd)
	require.NoError(t, syscall.Rmdir(filepath.Join(d, "gone")))
	_, err = unix.Openat(dirFd, "new", unix.O_CREAT|unix.O_WRONLY, 0o644)
	requireErrno(t, err, syscall.ENOENT)
}

func TestUnlinkOpen(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	p := filepath.Join(m.Dir(), "f")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteString("before")
	require.NoError(t, err)
	require.NoError(t, os.Remove(p))
	_, err = os.Stat(p)
	requireErrno(t, err, syscall.ENOENT)
	_, err = f.WriteString(" after")
	require.NoError(t, err)
	big := randBytes(9, 5<<20) // past the spill threshold
	_, err = f.WriteAt(big, 100)
	require.NoError(t, err)
	got := make([]byte, 12)
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, "before after", string(got[:12]))
	got = make([]byte, len(big))
	_, err = f.ReadAt(got, 100)
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, got))
	var st syscall.Stat_t
	require.NoError(t, syscall.Fstat(int(f.Fd()), &st))
	require.Zero(t, st.Nlink)
	require.NoError(t, f.Truncate(3))

	_, snap := captureMount(t, e, "s")
	entries, err := os.ReadDir(snap)
	require.NoError(t, err)
	require.Empty(t, entries, "an unlinked file is not captured")
	require.NoError(t, f.Close())
	_, snap = captureMount(t, e, "s")
	entries, err = os.ReadDir(snap)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestRename(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	root := m.Dir()
	for _, tc := range []struct {
		name     string
		files    map[string]string // path → content; a trailing / makes a dir
		from, to string
		flags    uint
		want     syscall.Errno
		after    map[string]string // content expected afterwards ("/" for a dir)
		gone     []string
	}{
		{name: "over-file", files: map[string]string{"a": "A", "b": "B"}, from: "a", to: "b",
			after: map[string]string{"b": "A"}, gone: []string{"a"}},
		{name: "across-dirs", files: map[string]string{"x/a": "A", "y/": ""}, from: "x/a", to: "y/b",
			after: map[string]string{"y/b": "A"}, gone: []string{"x/a"}},
		{name: "dir", files: map[string]string{"d/f": "F", "e/": ""}, from: "d", to: "e/d2",
			after: map[string]string{"e/d2/f": "F"}, gone: []string{"d"}},
		{name: "dir-over-empty-dir", files: map[string]string{"d/f": "F", "e/": ""}, from: "d", to: "e",
			after: map[string]string{"e/f": "F"}, gone: []string{"d"}},
		{name: "dir-over-nonempty", files: map[string]string{"d/f": "F", "e/g": "G"}, from: "d", to: "e",
			want: syscall.ENOTEMPTY},
		{name: "dir-below-itself", files: map[string]string{"d/s/f": "F"}, from: "d", to: "d/s/d",
			want: syscall.EINVAL},
		{name: "file-over-dir", files: map[string]string{"a": "A", "e/": ""}, from: "a", to: "e",
			want: syscall.EISDIR},
		{name: "dir-over-file", files: map[string]string{"d/": "", "a": "A"}, from: "d", to: "a",
			want: syscall.ENOTDIR},
		{name: "noreplace", files: map[string]string{"a": "A", "b": "B"}, from: "a", to: "b",
			flags: unix.RENAME_NOREPLACE, want: syscall.EEXIST},
		{name: "noreplace-free", files: map[string]string{"a": "A"}, from: "a", to: "b",
			flags: unix.RENAME_NOREPLACE, after: map[string]string{"b": "A"}, gone: []string{"a"}},
		{name: "exchange-file-dir", files: map[string]string{"a": "A", "d/f": "F"}, from: "a", to: "d",
			flags: unix.RENAME_EXCHANGE, after: map[string]string{"d": "A", "a/f": "F"}},
		{name: "exchange-missing", files: map[string]string{"a": "A"}, from: "a", to: "b",
			flags: unix.RENAME_EXCHANGE, want: syscall.ENOENT},
		{name: "missing", files: map[string]string{}, from: "a", to: "b", want: syscall.ENOENT},
		{name: "too-long", files: map[string]string{"a": "A"}, from: "a",
			to: strings.Repeat("l", manifest.MaxNameLen+1), want: syscall.ENAMETOOLONG},
		{name: "hardlink-same-file", files: map[string]string{"a": "A"}, from: "a", to: "a",
			after: map[string]string{"a": "A"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(root, tc.name)
			for p, c := range tc.files {
				if strings.HasSuffix(p, "/") {
					require.NoError(t, os.MkdirAll(filepath.Join(d, p), 0o755))
				} else {
					write(t, filepath.Join(d, p), c)
				}
			}
			require.NoError(t, os.MkdirAll(d, 0o755))
			var ino uint64
			if tc.want == 0 {
				ino = stat(t, filepath.Join(d, tc.from)).Ino
			}
			err := unix.Renameat2(unix.AT_FDCWD, filepath.Join(d, tc.from), unix.AT_FDCWD, filepath.Join(d, tc.to), tc.flags)
			if tc.want != 0 {
				requireErrno(t, err, tc.want)
				for p, c := range tc.files {
					if !strings.HasSuffix(p, "/") {
						require.Equal(t, c, read(t, filepath.Join(d, p)), "unchanged after a failed rename")
					}
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, ino, stat(t, filepath.Join(d, tc.to)).Ino, "inode number kept across rename")
			for p, c := range tc.after {
				require.Equal(t, c, read(t, filepath.Join(d, p)))
			}
			for _, p := range tc.gone {
				_, err := os.Lstat(filepath.Join(d, p))
				requireErrno(t, err, syscall.ENOENT)
			}
		})
	}
	// A capture holds exactly the tree the renames left.
	_, snap := captureMount(t, e, "s")
	require.Equal(t, dumpTree(t, root), dumpTree(t, snap))
}

func TestSymlink(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := m.Dir()
	l := filepath.Join(d, "passwd")
	require.NoError(t, os.Symlink("/etc/passwd", l))
	target, err := os.Readlink(l)
	require.NoError(t, err)
	require.Equal(t, "/etc/passwd", target)
	st := stat(t, l)
	require.Equal(t, uint32(syscall.S_IFLNK), st.Mode&syscall.S_IFMT)
	require.Equal(t, int64(len("/etc/passwd")), st.Size)
	requireErrno(t, os.Symlink("x", l), syscall.EEXIST)

	write(t, filepath.Join(d, "dir/real"), "content")
	require.NoError(t, os.Symlink("dir/real", filepath.Join(d, "rel")))
	require.Equal(t, "content", read(t, filepath.Join(d, "rel")))
	require.NoError(t, os.Symlink("nowhere", filepath.Join(d, "dangling")))
	_, err = os.Stat(filepath.Join(d, "dangling"))
	requireErrno(t, err, syscall.ENOENT)
	_, err = os.Readlink(filepath.Join(d, "dir/real"))
	requireErrno(t, err, syscall.EINVAL)

	_, snap := captureMount(t, e, "s")
	target, err = os.Readlink(filepath.Join(snap, "passwd"))
	require.NoError(t, err)
	require.Equal(t, "/etc/passwd", target)
	target, err = os.Readlink(filepath.Join(snap, "dangling"))
	require.NoError(t, err)
	require.Equal(t, "nowhere", target)
}

func TestHardLinks(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := m.Dir()
	a, b := filepath.Join(d, "a"), filepath.Join(d, "sub/b")
	write(t, a, "one")
	require.NoError(t, os.Mkdir(filepath.Join(d, "sub"), 0o755))
	require.NoError(t, os.Link(a, b))
	requireErrno(t, os.Link(a, b), syscall.EEXIST)
	requireErrno(t, os.Link(filepath.Join(d, "sub"), filepath.Join(d, "dirlink")), syscall.EPERM)
	sa, sb := stat(t, a), stat(t, b)
	require.Equal(t, sa.Ino, sb.Ino)
	require.Equal(t, uint64(2), uint64(sa.Nlink))
	require.NoError(t, os.WriteFile(b, []byte("two"), 0o644))
	require.Equal(t, "two", read(t, a))

	// A capture and a fork keep the link: one inode, two names.
	fm := forkMount(t, e, "s", "links-fork")
	fa, fb := filepath.Join(fm.Dir(), "a"), filepath.Join(fm.Dir(), "sub/b")
	// Look up the name in the subdirectory first: the other name is in a
	// directory loaded earlier or later, either must work.
	sb, sa = stat(t, fb), stat(t, fa)
	require.Equal(t, sa.Ino, sb.Ino)
	require.Equal(t, uint64(2), uint64(sa.Nlink))
	require.Equal(t, uint64(2), uint64(sb.Nlink))
	require.Equal(t, "two", read(t, fa))
	require.Equal(t, "two", read(t, fb))
	require.NoError(t, os.WriteFile(fa, []byte("three"), 0o644))
	require.Equal(t, "three", read(t, fb))
	require.Equal(t, "two", read(t, a), "the fork is isolated")

	// Unlinking one name leaves one link, also in a later capture.
	require.NoError(t, os.Remove(fa))
	require.Equal(t, uint64(1), uint64(stat(t, fb).Nlink))
	fm2 := forkMount(t, e, "links-fork", "links-fork2")
	require.Equal(t, uint64(1), uint64(stat(t, filepath.Join(fm2.Dir(), "sub/b")).Nlink))
	require.Equal(t, "three", read(t, filepath.Join(fm2.Dir(), "sub/b")))

	// Modify through a name whose sibling lives in a directory not loaded
	// yet, then capture: both entries must carry the new content.
	fm3 := forkMount(t, e, "s", "links-fork3")
	require.NoError(t, os.WriteFile(filepath.Join(fm3.Dir(), "a"), []byte("four"), 0o644))
	fm4 := forkMount(t, e, "links-fork3", "links-fork4")
	require.Equal(t, "four", read(t, filepath.Join(fm4.Dir(), "sub/b")))
	require.Equal(t, "four", read(t, filepath.Join(fm4.Dir(), "a")))
	require.Equal(t, dumpTree(t, fm3.Dir()), dumpTree(t, fm4.Dir()))

	// A symlink has hard links too (link(2) does not follow it), and a
	// snapshot keeps them one inode.
	l, l2 := filepath.Join(d, "l"), filepath.Join(d, "sub/l2")
	require.NoError(t, os.Symlink("a", l))
	require.NoError(t, os.Link(l, l2))
	require.Equal(t, stat(t, l).Ino, stat(t, l2).Ino)
	require.Equal(t, uint64(2), uint64(stat(t, l2).Nlink))
	_, snap := captureMount(t, e, "s")
	sl, sl2 := stat(t, filepath.Join(snap, "sub/l2")), stat(t, filepath.Join(snap, "l"))
	require.Equal(t, sl.Ino, sl2.Ino)
	require.Equal(t, uint64(2), uint64(sl.Nlink))
	require.Equal(t, uint32(syscall.S_IFLNK), sl.Mode&syscall.S_IFMT)
	target, err := os.Readlink(filepath.Join(snap, "sub/l2"))
	require.NoError(t, err)
	require.Equal(t, "a", target)
}

func TestXattr(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	p := filepath.Join(m.Dir(), "f")
	write(t, p, "x")
	require.NoError(t, unix.Setxattr(p, "user.b", []byte("value-b"), 0))
	require.NoError(t, unix.Setxattr(p, "user.a", []byte("A"), unix.XATTR_CREATE))
	requireErrno(t, unix.Setxattr(p, "user.a", []byte("A2"), unix.XATTR_CREATE), syscall.EEXIST)
	requireErrno(t, unix.Setxattr(p, "user.c", []byte("C"), unix.XATTR_REPLACE), syscall.ENODATA)
	require.NoError(t, unix.Setxattr(p, "user.a", []byte("AA"), unix.XATTR_REPLACE))

	sz, err := unix.Getxattr(p, "user.b", nil)
	require.NoError(t, err)
	require.Equal(t, len("value-b"), sz)
	buf := make([]byte, 3)
	_, err = unix.Getxattr(p, "user.b", buf)
	requireErrno(t, err, syscall.ERANGE)
	buf = make([]byte, 64)
	sz, err = unix.Getxattr(p, "user.b", buf)
	require.NoError(t, err)
	require.Equal(t, "value-b", string(buf[:sz]))
	_, err = unix.Getxattr(p, "user.none", buf)
	requireErrno(t, err, syscall.ENODATA)

	sz, err = unix.Listxattr(p, nil)
	require.NoError(t, err)
	require.Equal(t, len("user.a\x00user.b\x00"), sz)
	_, err = unix.Listxattr(p, make([]byte, 4))
	requireErrno(t, err, syscall.ERANGE)
	sz, err = unix.Listxattr(p, buf)
	require.NoError(t, err)
	require.Equal(t, "user.a\x00user.b\x00", string(buf[:sz]))

	// An empty value is a value.
	require.NoError(t, unix.Setxattr(p, "user.empty", nil, 0))
	sz, err = unix.Getxattr(p, "user.empty", buf)
	require.NoError(t, err)
	require.Zero(t, sz)

	require.NoError(t, unix.Removexattr(p, "user.b"))
	requireErrno(t, unix.Removexattr(p, "user.b"), syscall.ENODATA)

	_, snap := captureMount(t, e, "s")
	sz, err = unix.Getxattr(filepath.Join(snap, "f"), "user.a", buf)
	require.NoError(t, err)
	require.Equal(t, "AA", string(buf[:sz]))
	sz, err = unix.Listxattr(filepath.Join(snap, "f"), buf)
	require.NoError(t, err)
	require.Equal(t, "user.a\x00user.empty\x00", string(buf[:sz]))
}

func TestStatfs(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(m.Dir(), &st))
	require.Equal(t, int64(unix.FUSE_SUPER_MAGIC), int64(st.Type))
	require.Equal(t, int64(manifest.MaxNameLen), int64(st.Namelen))
	require.NotZero(t, st.Bsize)
	require.NotZero(t, st.Blocks)
}

func TestFlock(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	p := filepath.Join(m.Dir(), "installation_id.lock")
	write(t, p, "")
	f, err := os.Open(p)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB))
	err = exec.Command("flock", "-n", "-E", "42", p, "true").Run()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "flock -n must fail while we hold the lock")
	require.Equal(t, 42, exit.ExitCode())
	require.NoError(t, unix.Flock(int(f.Fd()), unix.LOCK_UN))
	require.NoError(t, exec.Command("flock", "-n", p, "true").Run())
}

func TestLocks(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	p := filepath.Join(m.Dir(), "db.sqlite-shm")
	write(t, p, "0123456789")
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: 0, Len: 10}
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk))
	require.Equal(t, fmt.Sprintf("busy %d", os.Getpid()), runHelperOutput(t, "trylock", p, "0", "10"))
	require.Equal(t, fmt.Sprintf("busy %d", os.Getpid()), runHelperOutput(t, "trylock", p, "5", "1"))
	require.Equal(t, "ok", runHelperOutput(t, "trylock", p, "20", "10"), "a disjoint range is free")
	lk.Type = unix.F_UNLCK
	require.NoError(t, unix.FcntlFlock(f.Fd(), unix.F_SETLK, &lk))
	require.Equal(t, "ok", runHelperOutput(t, "trylock", p, "0", "10"))
}

func TestMmapShared(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	p := filepath.Join(m.Dir(), "state.sqlite-shm")
	const size = 3*manifest.ChunkSize + 4096
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	// The mapping is made by another process: a fault on our own mount
	// inside the daemon's process can deadlock it.
	runHelperOutput(t, "mmap", p, fmt.Sprint(size), "11")
	want := randBytes(11, size)
	got := make([]byte, size)
	_, err = f.ReadAt(got, 0) // a descriptor opened before the mapping
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	require.NoError(t, f.Close())
	got, err = os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	_, snap := captureMount(t, e, "s")
	got, err = os.ReadFile(filepath.Join(snap, "state.sqlite-shm"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "captured content")
}

func TestFallocate(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	p := filepath.Join(m.Dir(), "f")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	fd := int(f.Fd())
	require.NoError(t, unix.Fallocate(fd, 0, 0, 1<<20))
	st, err := f.Stat()
	require.NoError(t, err)
	require.Equal(t, int64(1<<20), st.Size())
	require.NoError(t, unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, 4<<20))
	st, err = f.Stat()
	require.NoError(t, err)
	require.Equal(t, int64(1<<20), st.Size(), "KEEP_SIZE keeps the size")

	data := randBytes(12, 300<<10)
	_, err = f.WriteAt(data, 0)
	require.NoError(t, err)
	// Punch a hole from inside chunk 0 to inside chunk 3.
	holeOff, holeLen := int64(1000), int64(3*manifest.ChunkSize)
	require.NoError(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, holeOff, holeLen))
	requireErrno(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE, 0, 10), syscall.EOPNOTSUPP)
	want := make([]byte, 1<<20)
	copy(want, data)
	clear(want[holeOff : holeOff+holeLen])
	got, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))

	// Punch over stored content too.
	require.NoError(t, e.Sync(context.Background(), "s"))
	require.NoError(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 250<<10, 100<<10))
	clear(want[250<<10 : 350<<10])
	got, err = os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	_, snap := captureMount(t, e, "s")
	got, err = os.ReadFile(filepath.Join(snap, "f"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
}

func TestCopyFileRange(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	src := randBytes(13, 200<<10)
	sp, dp := filepath.Join(m.Dir(), ".claude.json"), filepath.Join(m.Dir(), "backup")
	require.NoError(t, os.WriteFile(sp, src, 0o644))
	write(t, dp, "prefix")
	in, err := os.Open(sp)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dp, os.O_RDWR, 0)
	require.NoError(t, err)
	defer out.Close()
	offIn, offOut := int64(100), int64(3)
	total := 0
	for total < len(src)-100 {
		k, err := unix.CopyFileRange(int(in.Fd()), &offIn, int(out.Fd()), &offOut, len(src), 0)
		require.NoError(t, err)
		if k == 0 {
			break
		}
		total += k
	}
	require.Equal(t, len(src)-100, total)
	want := append([]byte("pre"), src[100:]...)
	got, err := os.ReadFile(dp)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
	_, snap := captureMount(t, e, "s")
	got, err = os.ReadFile(filepath.Join(snap, "backup"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got))
}

func TestNameTooLong(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	d := m.Dir()
	ok := strings.Repeat("k", manifest.MaxNameLen)
	long := strings.Repeat("l", manifest.MaxNameLen+1)
	write(t, filepath.Join(d, ok), "fits")
	require.Equal(t, "fits", read(t, filepath.Join(d, ok)))
	for name, fn := range map[string]func(string) error{
		"create":  func(p string) error { return os.WriteFile(p, nil, 0o644) },
		"mkdir":   func(p string) error { return os.Mkdir(p, 0o755) },
		"symlink": func(p string) error { return os.Symlink("x", p) },
		"link":    func(p string) error { return os.Link(filepath.Join(d, ok), p) },
		"stat":    func(p string) error { _, err := os.Stat(p); return err },
	} {
		requireErrno(t, fn(filepath.Join(d, long)), syscall.ENAMETOOLONG, name)
	}
}

func TestInodeNumbers(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := m.Dir()
	write(t, filepath.Join(d, "a/f"), "x")
	ino := stat(t, filepath.Join(d, "a/f")).Ino
	dino := stat(t, filepath.Join(d, "a")).Ino
	require.NotEqual(t, ino, dino)
	for range 3 {
		require.Equal(t, ino, stat(t, filepath.Join(d, "a/f")).Ino)
	}
	require.NoError(t, os.Rename(filepath.Join(d, "a/f"), filepath.Join(d, "g")))
	require.Equal(t, ino, stat(t, filepath.Join(d, "g")).Ino)
	require.NoError(t, os.Rename(filepath.Join(d, "a"), filepath.Join(d, "b")))
	require.Equal(t, dino, stat(t, filepath.Join(d, "b")).Ino)
	// A second mount of the same session shows the same numbers.
	m2, err := e.Mount(context.Background(), "s", "", t.TempDir(), MountOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m2.Unmount() })
	require.Equal(t, ino, stat(t, filepath.Join(m2.Dir(), "g")).Ino)
}

// TestInotify: changes made through the mount reach inotify watchers
// (Codex watches its skills directory).
func TestInotify(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	d := filepath.Join(m.Dir(), "skills")
	require.NoError(t, os.Mkdir(d, 0o755))
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	require.NoError(t, err)
	defer unix.Close(fd)
	_, err = unix.InotifyAddWatch(fd, d, unix.IN_CREATE|unix.IN_MODIFY|unix.IN_DELETE|unix.IN_MOVED_TO)
	require.NoError(t, err)
	write(t, filepath.Join(d, "a"), "x")
	require.NoError(t, os.Rename(filepath.Join(d, "a"), filepath.Join(d, "b")))
	require.NoError(t, os.Remove(filepath.Join(d, "b")))
	var got []string
	buf := make([]byte, 4096)
	for deadline := time.Now().Add(5 * time.Second); len(got) < 4 && time.Now().Before(deadline); {
		k, err := unix.Read(fd, buf)
		if err == unix.EAGAIN {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		require.NoError(t, err)
		for off := 0; off < k; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:off+unix.SizeofInotifyEvent+int(ev.Len)]), "\x00")
			got = append(got, fmt.Sprintf("%x:%s", ev.Mask, name))
			off += unix.SizeofInotifyEvent + int(ev.Len)
		}
	}
	require.Equal(t, []string{
		fmt.Sprintf("%x:a", unix.IN_CREATE),
		fmt.Sprintf("%x:a", unix.IN_MODIFY),
		fmt.Sprintf("%x:b", unix.IN_MOVED_TO),
		fmt.Sprintf("%x:b", unix.IN_DELETE),
	}, got)
}

// TestFileSizeLimit: a write or truncate past the size limit fails with
// EFBIG instead of making the daemon allocate a chunk list for it.
func TestFileSizeLimit(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	p := filepath.Join(m.Dir(), "huge")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt([]byte("x"), maxFileSize)
	requireErrno(t, err, syscall.EFBIG)
	requireErrno(t, os.Truncate(p, maxFileSize+1), syscall.EFBIG)
	require.NoError(t, os.Truncate(p, 1<<30)) // sparse: 1 GiB of holes is fine
	st, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, int64(1<<30), st.Size())
}

// TestEmptyDirStored: a new directory's tree node (the empty one) is
// stored by the flush that stores the directory, not by the mkdir, and a
// capture of a fresh store holding only empty directories is complete.
func TestEmptyDirStored(t *testing.T) {
	t.Parallel()
	store := cas.NewMemory()
	e := NewTestEngine(t, store)
	m := MountForTest(t, e, "s", "", MountOptions{})
	require.NoError(t, os.MkdirAll(filepath.Join(m.Dir(), "a", "b"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "c"), 0o700))
	snap, id, err := e.Capture(context.Background(), "s", "empty dirs", nil)
	require.NoError(t, err)
	require.NoError(t, catalog.VerifyComplete(context.Background(), store, snap.Root))
	has, err := store.HasMany(context.Background(), []cas.Ref{manifest.EmptyTreeRef()})
	require.NoError(t, err)
	require.True(t, has[0], "the empty tree is stored")
	dir := mountSnapshot(t, e, id)
	for _, p := range []string{"a/b", "c"} {
		ents, err := os.ReadDir(filepath.Join(dir, p))
		require.NoError(t, err, p)
		require.Empty(t, ents, p)
	}
	require.Equal(t, uint32(0o700), stat(t, filepath.Join(dir, "c")).Mode&0o777)
}
