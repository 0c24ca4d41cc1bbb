package fusefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/manifest"
)

// chunkBlocks512 is one chunk in st_blocks units: what homefs may count
// past ext4 for each data extent (it knows holes per chunk).
const chunkBlocks512 = manifest.ChunkSize / 512

// extents lists fd's data extents as SEEK_DATA and SEEK_HOLE report them.
func extents(t *testing.T, fd int) [][2]int64 {
	t.Helper()
	var out [][2]int64
	for off := int64(0); ; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			return out
		}
		require.NoError(t, err, "SEEK_DATA %d", off)
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		require.NoError(t, err, "SEEK_HOLE %d", data)
		require.Greater(t, hole, data)
		out = append(out, [2]int64{data, hole})
		off = hole
	}
}

// sparseLike checks the file open at fd against ext4's file at ref with
// the same content: as many blocks as ext4, or at most a chunk more per
// data extent; data extents covering ext4's, at most a chunk longer each;
// and the end of the file a hole to both SEEKs.
func sparseLike(t *testing.T, what string, fd int, ref string) {
	t.Helper()
	var st, want unix.Stat_t
	require.NoError(t, unix.Fstat(fd, &st))
	require.NoError(t, unix.Stat(ref, &want))
	require.Equal(t, want.Size, st.Size, what)
	rf, err := os.Open(ref)
	require.NoError(t, err)
	defer rf.Close()
	wantExt := extents(t, int(rf.Fd()))
	got := extents(t, fd)
	require.NotEmpty(t, got, what)
	slack := int64(len(wantExt)) * chunkBlocks512
	require.GreaterOrEqual(t, st.Blocks, want.Blocks, "%s: st_blocks below ext4's (%d)", what, want.Blocks)
	require.LessOrEqual(t, st.Blocks, want.Blocks+slack, "%s: st_blocks %d, ext4 %d", what, st.Blocks, want.Blocks)
	var gotLen, wantLen int64
	for _, w := range wantExt {
		wantLen += w[1] - w[0]
		covered := false
		for _, g := range got {
			covered = covered || g[0] <= w[0] && w[1] <= g[1]
		}
		require.True(t, covered, "%s: ext4's data %v not within %v", what, w, got)
	}
	for _, g := range got {
		gotLen += g[1] - g[0]
	}
	require.LessOrEqual(t, gotLen, wantLen+int64(len(wantExt))*manifest.ChunkSize, "%s: data %v, ext4 %v", what, got, wantExt)
	_, err = unix.Seek(fd, st.Size, unix.SEEK_DATA)
	require.ErrorIs(t, err, unix.ENXIO, what)
	_, err = unix.Seek(fd, st.Size, unix.SEEK_HOLE)
	require.ErrorIs(t, err, unix.ENXIO, what)
}

// sparseAt checks the file at path as sparseLike does.
func sparseAt(t *testing.T, what, path, ref string) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sparseLike(t, what, int(f.Fd()), ref)
}

// writeSparse writes 4 KiB, a hole of gap bytes and 4 KiB through a
// descriptor opened with flags, fsyncs, runs during with the descriptor
// still open, and closes it.
func writeSparse(t *testing.T, path string, flags, gap int, during func(fd int)) {
	t.Helper()
	f, err := os.OpenFile(path, flags, 0o644)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(randBytes(1, 4096), 0)
	require.NoError(t, err)
	_, err = f.WriteAt(randBytes(2, 4096), int64(4096+gap))
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	if during != nil {
		during(int(f.Fd()))
	}
	require.NoError(t, f.Close())
}

// duBytes is what du says path takes, in bytes.
func duBytes(t *testing.T, path string) int64 {
	t.Helper()
	out, err := exec.Command("du", "-B1", path).CombinedOutput()
	require.NoError(t, err, "%s", out)
	k, err := strconv.ParseInt(strings.Fields(string(out))[0], 10, 64)
	require.NoError(t, err)
	return k
}

// TestSparseFiles: a file with a 10 MiB hole between two 4 KiB extents,
// written by each route a write can take (staged: a new file written
// write-only; served: O_RDWR, the daemon's buffers), has about ext4's
// st_blocks, and SEEK_DATA and SEEK_HOLE find its extents at chunk
// granularity, while open, after its close, reopened, once stored and in a
// snapshot; du agrees with ext4 within a chunk per extent, and cp
// --sparse=always (also by an unprivileged user) copies it sparse, into
// the mount and out of it.
func TestSparseFiles(t *testing.T) {
	t.Parallel()
	needTool(t, "du")
	needTool(t, "cp")
	const gap = 10 << 20
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "s", "", MountOptions{AllowOther: os.Geteuid() == 0})
	ref := t.TempDir() // ext4 here, beside the store
	routes := map[string]int{
		"staged": os.O_WRONLY | os.O_CREATE | os.O_TRUNC,
		"served": os.O_RDWR | os.O_CREATE | os.O_TRUNC,
	}
	for name, flags := range routes {
		want := filepath.Join(ref, name)
		writeSparse(t, want, flags, gap, nil)
		p := filepath.Join(m.Dir(), name)
		writeSparse(t, p, flags, gap, func(fd int) { sparseLike(t, name+" open", fd, want) })
		sparseAt(t, name+" closed", p, want)
		got := duBytes(t, p)
		wantDu := duBytes(t, want)
		require.GreaterOrEqual(t, got, wantDu, name)
		require.LessOrEqual(t, got, wantDu+2*manifest.ChunkSize, "%s: du %d, ext4 %d", name, got, wantDu)

		for _, dst := range []string{filepath.Join(ref, name+".cp"), filepath.Join(m.Dir(), name+".cp")} {
			out, err := exec.Command("cp", "--sparse=always", p, dst).CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.True(t, bytes.Equal(readBytes(t, want), readBytes(t, dst)), dst)
			sparseAt(t, name+" copied to "+dst, dst, want)
		}
	}
	require.NoError(t, e.Sync(context.Background(), "s"))
	_, snap := captureMount(t, e, "s")
	for name := range routes {
		want := filepath.Join(ref, name)
		sparseAt(t, name+" stored", filepath.Join(m.Dir(), name), want)
		sparseAt(t, name+" in a snapshot", filepath.Join(snap, name), want)
		sparseAt(t, name+" copy in a snapshot", filepath.Join(snap, name+".cp"), want)
	}

	if os.Geteuid() != 0 {
		return
	}
	needTool(t, "setpriv")
	for p := filepath.Dir(m.Dir()); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "nobody"), 0o755))
	require.NoError(t, os.Chown(filepath.Join(m.Dir(), "nobody"), nobody, nobody))
	out, err := asNobody(t, m.Dir(), "cp --sparse=always staged nobody/copy && du -B1 nobody/copy")
	require.NoError(t, err, out)
	k, err := strconv.ParseInt(strings.Fields(out)[0], 10, 64)
	require.NoError(t, err, out)
	require.LessOrEqual(t, k, duBytes(t, filepath.Join(ref, "staged"))+2*manifest.ChunkSize, "du as nobody: %s", out)
	sparseAt(t, "copied by nobody", filepath.Join(m.Dir(), "nobody/copy"), filepath.Join(ref, "staged"))
}

func readBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return b
}

// TestSparseEdits: holes made by fallocate(PUNCH_HOLE), by a truncate
// that extends, and those of a sparse file an appender reopens (its
// backing file a sparse copy) show in st_blocks and SEEK_DATA/SEEK_HOLE
// as on ext4, within a chunk per extent, before and after a flush.
func TestSparseEdits(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	ref := t.TempDir()
	edits := []struct {
		name string
		do   func(t *testing.T, path string)
	}{
		{"punch", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteAt(randBytes(3, 1<<20), 0)
			require.NoError(t, err)
			require.NoError(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 64<<10, 896<<10))
			require.NoError(t, f.Sync())
		}},
		{"extend", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.WriteAt(randBytes(4, 4096), 0)
			require.NoError(t, err)
			require.NoError(t, f.Truncate(10<<20))
			require.NoError(t, f.Sync())
		}},
		{"append", func(t *testing.T, path string) {
			writeSparse(t, path, os.O_RDWR|os.O_CREATE, 10<<20, nil)
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			defer f.Close()
			_, err = f.Write(randBytes(5, 4096))
			require.NoError(t, err)
			sparseLike(t, "appender open", int(f.Fd()), filepath.Join(ref, "append"))
			require.NoError(t, f.Sync())
		}},
		{"takeover", func(t *testing.T, path string) {
			// Staged, closed, then opened by a writer the daemon serves,
			// which takes the content over from the staging file.
			writeSparse(t, path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 512<<10, nil)
			f, err := os.OpenFile(path, os.O_RDWR, 0)
			require.NoError(t, err)
			defer f.Close()
			sparseLike(t, "taken over", int(f.Fd()), filepath.Join(ref, "takeover"))
		}},
	}
	// ext4 first: the appender compares with it while open.
	for _, ed := range edits {
		ed.do(t, filepath.Join(ref, ed.name))
	}
	for _, ed := range edits {
		p := filepath.Join(m.Dir(), ed.name)
		ed.do(t, p)
		sparseAt(t, ed.name, p, filepath.Join(ref, ed.name))
	}
	require.NoError(t, m.engine.Sync(context.Background(), "s"))
	for _, ed := range edits {
		sparseAt(t, ed.name+" stored", filepath.Join(m.Dir(), ed.name), filepath.Join(ref, ed.name))
	}
	var st unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(m.Dir(), "punch"), &st))
	require.Equal(t, int64(2*chunkBlocks512), st.Blocks, "the punched chunks are holes")
}

// TestSparseAppender: fallocate through a passed-through appender, a hole
// punched and the file grown, is repeated in its backing file as holes:
// content, size, st_blocks and the extents agree with ext4 while the
// appender is open and after. ext4 grows by ftruncate here: fallocate
// reserves blocks on ext4 and none on homefs (docs/ARCHITECTURE.md).
func TestSparseAppender(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	ref := t.TempDir()
	run := func(dir string, grow func(fd int, size int64) error, during func(path string, fd int)) {
		path := filepath.Join(dir, "log")
		require.NoError(t, os.WriteFile(path, randBytes(6, 256<<10), 0o644))
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
		require.NoError(t, err)
		defer f.Close()
		fd := int(f.Fd())
		_, err = f.Write(randBytes(7, 4096))
		require.NoError(t, err)
		require.NoError(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 64<<10, 128<<10))
		var st unix.Stat_t
		require.NoError(t, unix.Fstat(fd, &st))
		require.NoError(t, grow(fd, st.Size))
		_, err = f.Write(randBytes(8, 4096))
		require.NoError(t, err)
		if during != nil {
			during(path, fd)
		}
	}
	run(ref, func(fd int, size int64) error { return unix.Ftruncate(fd, size+1<<20) }, nil)
	want := filepath.Join(ref, "log")
	run(m.Dir(), func(fd int, size int64) error { return unix.Fallocate(fd, 0, size, 1<<20) }, func(path string, fd int) {
		require.True(t, bytes.Equal(readBytes(t, want), readBytes(t, path)), "content while the appender is open")
		sparseLike(t, "appender open", fd, want)
	})
	got := filepath.Join(m.Dir(), "log")
	require.True(t, bytes.Equal(readBytes(t, want), readBytes(t, got)), "content")
	sparseAt(t, "closed", got, want)
}

// TestBlocksOtherKinds: directories and symlinks count blocks as ext4's:
// a directory one block, a short symlink none (its target in the inode),
// a long one a block.
func TestBlocksOtherKinds(t *testing.T) {
	t.Parallel()
	_, m := newMount(t)
	ref := t.TempDir()
	for _, dir := range []string{ref, m.Dir()} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
		require.NoError(t, os.Symlink("short", filepath.Join(dir, "short")))
		require.NoError(t, os.Symlink(strings.Repeat("x", 100), filepath.Join(dir, "long")))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "small"), []byte("hello"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "empty"), nil, 0o644))
	}
	for _, name := range []string{"d", "short", "long", "small", "empty"} {
		require.Equal(t, stat(t, filepath.Join(ref, name)).Blocks, stat(t, filepath.Join(m.Dir(), name)).Blocks, name)
	}
}
