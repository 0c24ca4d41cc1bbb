package fusefs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
)

// stagedState reports whether the file at path of session s is staged,
// and how many passthrough handles it has (-1 without a backing file).
func stagedState(t *testing.T, e *Engine, session, path string) (bool, int) {
	t.Helper()
	n := fileNodeOf(t, e, session, path)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.data.backing == nil {
		return false, -1
	}
	return n.data.backing.isStaged(), n.data.backing.opens
}

// readThroughBacking reads the file at p, name in session "s", whole and
// checks that it held want and that its open read the backing file.
func readThroughBacking(t *testing.T, e *Engine, p, name string, want []byte) {
	t.Helper()
	r, err := openT(t, p, os.O_RDONLY, 0)
	require.NoError(t, err)
	defer r.Close()
	_, opens := keptState(t, e, "s", name)
	require.Equal(t, 1, opens, "the reader reads the backing file")
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.NoError(t, r.Close())
}

// absorbedState reports whether the absorber took the file at path of
// session s: it has no backing file, or only a read copy no handle uses.
func absorbedState(t *testing.T, e *Engine, session, path string) bool {
	t.Helper()
	kept, opens := keptState(t, e, session, path)
	return opens == -1 || kept && opens == 0
}

// needStaging skips a test of staged files where the filesystem under the
// test's temporary directory cannot stage them (no multigrain timestamps).
func needStaging(t *testing.T) {
	t.Helper()
	if ok, err := probeFineCtime(t.TempDir()); !ok {
		t.Skipf("no staged files here: ctime does not change on every write (%v)", err)
	}
}

// stagedWriter mounts a new session "s" and opens name in it write-only
// and new (the open that is staged), having written first through it.
func stagedWriter(t *testing.T, name, first string) (*Engine, *Mount, string, *os.File) {
	t.Helper()
	needStaging(t)
	e, m, p := mountedFile(t, name)
	w, err := openT(t, p, os.O_WRONLY|os.O_CREATE, 0o755)
	require.NoError(t, err)
	_, err = w.WriteString(first)
	require.NoError(t, err)
	return e, m, p, w
}

// TestStagedFile: a write-only writer of a new file writes to a staging
// file; stat, readers, captures and forks see every byte at once, and once
// it is closed the content is absorbed and the staging file dropped.
func TestStagedFile(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e, _, p := mountedFile(t, "out.bin")
	ctx := context.Background()
	w, err := openT(t, p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	want := randBytes(1, 3<<20+123)
	_, err = w.Write(want[:2<<20])
	require.NoError(t, err)
	staged, opens := stagedState(t, e, "s", "out.bin")
	require.True(t, staged, "a write-only open of an empty file is staged")
	require.Equal(t, 1, opens)
	require.Equal(t, int64(2<<20), stat(t, p).Size)

	// A reader joins the passthrough and sees what was written.
	r, err := openT(t, p, os.O_RDONLY, 0)
	require.NoError(t, err)
	got := make([]byte, 2<<20)
	_, err = r.ReadAt(got, 0)
	require.NoError(t, err)
	require.Equal(t, want[:2<<20], got)

	_, snap := captureMount(t, e, "s")
	require.Equal(t, want[:2<<20], []byte(read(t, filepath.Join(snap, "out.bin"))))
	_, err = w.Write(want[2<<20:])
	require.NoError(t, err)
	// The snapshot does not change; a fork (captured now) has the rest.
	require.Equal(t, want[:2<<20], []byte(read(t, filepath.Join(snap, "out.bin"))))
	_, err = e.Fork(ctx, "s", "f")
	require.NoError(t, err)
	fork := MountForTest(t, e, "f", "", MountOptions{})
	require.Equal(t, want, []byte(read(t, filepath.Join(fork.Dir(), "out.bin"))))
	// The times are the writes'.
	var st unix.Stat_t
	require.NoError(t, unix.Fstat(int(w.Fd()), &st))
	mtime := stat(t, p).Mtim
	require.Equal(t, st.Mtim, unix.Timespec(mtime))

	require.NoError(t, w.Close())
	require.NoError(t, r.Close())
	// Once no one has it open, the session's absorber takes it, with no
	// flush (and keeps the staging file as its read copy).
	require.Eventually(t, func() bool { return absorbedState(t, e, "s", "out.bin") },
		5*time.Second, 10*time.Millisecond, "the absorber takes the closed staging file")
	require.Equal(t, want, []byte(read(t, p)))
	require.NoError(t, e.Sync(ctx, "s"))
	s, err := e.live(ctx, "s")
	require.NoError(t, err)
	left, err := os.ReadDir(s.backingDir)
	require.NoError(t, err)
	held := heldBackingNames(s)
	for _, ent := range left {
		require.True(t, held[ent.Name()], "%s: a name in the backing directory is a file the session holds", ent.Name())
	}
	_, snap = captureMount(t, e, "s")
	require.Equal(t, want, []byte(read(t, filepath.Join(snap, "out.bin"))))
}

// TestStagedUnstage: when the daemon must serve a staged file's content
// itself (truncate, copy_file_range, a read in a mount without the
// passthrough), it takes the content over and stays correct.
func TestStagedUnstage(t *testing.T) {
	t.Parallel()
	e, m, p, w := stagedWriter(t, "f", "hello world")
	require.NoError(t, w.Truncate(5))
	staged, _ := stagedState(t, e, "s", "f")
	require.False(t, staged, "truncate unstages")
	_, err := w.WriteAt([]byte("!!"), 5)
	require.NoError(t, err)
	require.Equal(t, "hello!!", read(t, p))
	_, snap := captureMount(t, e, "s")
	require.Equal(t, "hello!!", read(t, filepath.Join(snap, "f")))

	// copy_file_range out of a staged file, and into one.
	src := filepath.Join(m.Dir(), "src")
	sw, err := openT(t, src, os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = sw.WriteString("0123456789")
	require.NoError(t, err)
	dst := filepath.Join(m.Dir(), "dst")
	dw, err := openT(t, dst, os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	sr, err := openT(t, src, os.O_RDONLY, 0)
	require.NoError(t, err)
	offIn, offOut := int64(2), int64(0)
	k, err := unix.CopyFileRange(int(sr.Fd()), &offIn, int(dw.Fd()), &offOut, 5, 0)
	require.NoError(t, err)
	require.Equal(t, 5, k)
	_, err = dw.WriteAt([]byte("X"), 5)
	require.NoError(t, err)
	require.Equal(t, "23456X", read(t, dst))

	// A second mount of the same tree reads through the daemon.
	o := filepath.Join(m.Dir(), "other")
	ow, err := openT(t, o, os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = ow.WriteString("first")
	require.NoError(t, err)
	sub := MountForTest(t, e, "s", "", MountOptions{})
	require.Equal(t, "first", read(t, filepath.Join(sub.Dir(), "other")))
	_, err = ow.WriteString(" second")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return read(t, filepath.Join(sub.Dir(), "other")) == "first second"
	}, 3*shortCacheTimeout, 20*time.Millisecond)
}

// TestStagedConcurrentCapture: captures taken while a writer streams
// records into a staged file each hold a prefix of the stream.
func TestStagedConcurrentCapture(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e, _, p := mountedFile(t, "stream")
	w, err := openT(t, p, os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	var stream []byte
	for i := range 20000 {
		stream = fmt.Appendf(stream, "record %08d %s\n", i, "................................................")
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for off := 0; off < len(stream); off += 4000 {
			if _, err := w.Write(stream[off:min(off+4000, len(stream))]); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var snaps []string
	for range 8 {
		_, snap := captureMount(t, e, "s")
		snaps = append(snaps, snap)
	}
	wg.Wait()
	_, last := captureMount(t, e, "s")
	snaps = append(snaps, last)
	for _, snap := range snaps {
		got := []byte(read(t, filepath.Join(snap, "stream")))
		require.True(t, isPrefix(got, stream), "snapshot of %d bytes is a prefix of the stream", len(got))
	}
	require.Len(t, read(t, filepath.Join(last, "stream")), len(stream))
}

// TestStagedDurability kills the daemon after fsyncs of staged files:
// what was fsynced is back, at the names made durable, and the staging
// files are gone once the new daemon has replayed them.
func TestStagedDurability(t *testing.T) {
	t.Parallel()
	needStaging(t)
	d := startDurable(t)
	storeDir, mnt := d.storeDir, d.mnt
	write := func(name string, data []byte, sync bool) *os.File {
		f, err := openT(t, filepath.Join(mnt, name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		if sync {
			require.NoError(t, f.Sync())
		}
		return f
	}
	big := randBytes(31, 9<<20+5)
	bigF := write("big.bin", big, true)
	links := backingLinks(t, d.cmd.Process.Pid, storeDir)
	require.NotEmpty(t, links, "the daemon holds a staging file")
	_, err := bigF.Write([]byte("not synced"))
	require.NoError(t, err)

	// Claude Code's replace: temp file, fsync, rename, fsync the directory.
	tmp := write("settings.json.tmp", []byte(`{"v":2}`), true)
	require.NoError(t, tmp.Close())
	require.NoError(t, os.Rename(filepath.Join(mnt, "settings.json.tmp"), filepath.Join(mnt, "settings.json")))
	require.NoError(t, syncDir(mnt))

	// Written and fsynced again after another file's fsync moved the head.
	log := write("log", []byte("one\n"), true)
	write("other", []byte("x"), true)
	_, err = log.Write([]byte("two\n"))
	require.NoError(t, err)
	require.NoError(t, log.Sync())

	// Truncated after its fsync (which unstages it), not synced again:
	// either state may come back, never the old size with zeros.
	trunc := randBytes(32, 100<<10)
	tf := write("trunc", trunc, true)
	require.NoError(t, tf.Truncate(10))

	d.kill(t)

	m := d.remount(t)
	got := []byte(read(t, filepath.Join(m.Dir(), "big.bin")))
	require.True(t, isPrefix(big, got), "every fsynced byte is back (%d bytes, want at least %d)", len(got), len(big))
	require.True(t, len(got) == len(big) || string(got[len(big):]) == "not synced", "the rest is whole or absent")
	require.Equal(t, `{"v":2}`, read(t, filepath.Join(m.Dir(), "settings.json")))
	_, err = os.Stat(filepath.Join(m.Dir(), "settings.json.tmp"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.Equal(t, "one\ntwo\n", read(t, filepath.Join(m.Dir(), "log")))
	require.Equal(t, "x", read(t, filepath.Join(m.Dir(), "other")))
	if got := read(t, filepath.Join(m.Dir(), "trunc")); got != string(trunc) {
		require.Equal(t, string(trunc[:10]), got, "the fsynced state or the truncated one")
	}
	left, err := os.ReadDir(backingDir(storeDir, "d"))
	require.NoError(t, err)
	for _, e := range left {
		// Kept sealed for this daemon's life (sealBackingDir), where the
		// file system can seal; removed otherwise.
		require.True(t, strings.HasPrefix(e.Name(), sealedPrefix), "replayed staging file %s is sealed or removed", e.Name())
	}
}

// TestStagedIdleSurvivesKill: a staged file left open and idle (`cmd >
// file` whose command went quiet) is saved by the periodic flush, so a
// kill -9 of the daemon loses none of it; before, only a close, an fsync or
// a capture saved it, and the file came back empty.
func TestStagedIdleSurvivesKill(t *testing.T) {
	t.Parallel()
	needStaging(t)
	d := startDurable(t, "50ms")
	out := randBytes(33, 3<<20+17)
	f, err := openT(t, filepath.Join(d.mnt, "out"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	require.NoError(t, err)
	_, err = f.Write(out)
	require.NoError(t, err)
	// Idle, open, for many flush intervals (two suffice).
	time.Sleep(2 * time.Second)
	d.kill(t)
	m := d.remount(t)
	require.Equal(t, len(out), len(read(t, filepath.Join(m.Dir(), "out"))))
	require.True(t, read(t, filepath.Join(m.Dir(), "out")) == string(out), "the idle file's content is back")
}

func TestIdleGap(t *testing.T) {
	var b backing
	now := time.Unix(1000, 0)
	gaps := []time.Duration{}
	for range 8 {
		b.stage.idle.due = true
		b.idleAbsorbed(now)
		gaps = append(gaps, b.stage.idle.next.Sub(now))
	}
	require.Equal(t, []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}, gaps)
	b.idleAbsorbed(now) // not due: nothing changes
	require.Equal(t, 5*time.Minute, b.stage.idle.next.Sub(now))
}

// TestStagedKillPriv: privileges set after a staged write stay; a write
// passed through after them drops them as the writer's would on ext4: the
// kernel asks the daemon to (an empty SETATTR) for a writer without
// CAP_FSETID only, so root's writes keep setuid, another user's through
// the same descriptor drop it.
func TestStagedKillPriv(t *testing.T) {
	t.Parallel()
	e, _, p, w := stagedWriter(t, "tool", "#!/bin/sh\n")
	staged, _ := stagedState(t, e, "s", "tool")
	require.True(t, staged)
	require.NoError(t, unix.Chmod(p, 0o4757))
	require.Equal(t, uint32(syscall.S_IFREG|0o4757), stat(t, p).Mode)
	_, err := w.WriteString("echo hi\n")
	require.NoError(t, err)
	require.Equal(t, uint32(syscall.S_IFREG|0o4757), stat(t, p).Mode, "root's write after chmod +s keeps it")

	_, err = asUser(1000, 1000, func() (string, error) {
		_, err := unix.Write(int(w.Fd()), []byte("echo user\n"))
		return "", err
	})
	require.NoError(t, err)
	require.Equal(t, uint32(syscall.S_IFREG|0o757), stat(t, p).Mode, "a user's write after chmod +s drops it")
	require.NoError(t, w.Close())
	require.Equal(t, "#!/bin/sh\necho hi\necho user\n", read(t, p))
}

// TestStagedModel: random writes (sparse, overlapping, past the end)
// through a staged file, with captures, flushes and reads between them:
// stat, a reader, every snapshot and the file once closed always agree
// with a byte model; a snapshot never changes afterwards.
func TestStagedModel(t *testing.T) {
	t.Parallel()
	e, _, p, w := stagedWriter(t, "model", "")
	r, err := openT(t, p, os.O_RDONLY, 0)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(11, 12))
	model := []byte{}
	type snap struct {
		dir  string
		want []byte
	}
	var snaps []snap
	for op := range 300 {
		switch k := rng.IntN(100); {
		case k < 75:
			off := rng.IntN(len(model) + 200<<10)
			data := randBytes(uint64(op), 1+rng.IntN(150<<10))
			if rng.IntN(4) == 0 {
				clear(data) // zeros: holes for the store
			}
			_, err := w.WriteAt(data, int64(off))
			require.NoError(t, err)
			if end := off + len(data); end > len(model) {
				model = append(model, make([]byte, end-len(model))...)
			}
			copy(model[off:], data)
		case k < 82 && len(snaps) < 8:
			_, dir := captureMount(t, e, "s")
			snaps = append(snaps, snap{dir, bytes.Clone(model)})
			require.Equal(t, model, []byte(read(t, filepath.Join(dir, "model"))), "op %d: snapshot", op)
		case k < 90:
			require.Equal(t, int64(len(model)), stat(t, p).Size, "op %d: stat", op)
		case k < 95:
			got := make([]byte, len(model)+1)
			n, _ := r.ReadAt(got, 0)
			require.Equal(t, model, got[:n], "op %d: reader", op)
		default:
			require.NoError(t, e.Sync(context.Background(), "s"))
		}
	}
	require.NoError(t, w.Close())
	require.NoError(t, r.Close())
	require.Eventually(t, func() bool { return absorbedState(t, e, "s", "model") },
		5*time.Second, 10*time.Millisecond)
	require.Equal(t, model, []byte(read(t, p)))
	for i, sn := range snaps {
		require.Equal(t, sn.want, []byte(read(t, filepath.Join(sn.dir, "model"))), "snapshot %d changed", i)
	}
}

// TestNoStaging: Options.NoStaging serves writers of new files through
// the daemon.
func TestNoStaging(t *testing.T) {
	t.Parallel()
	store := cas.NewMemory()
	e := New(store, catalog.New(store), Options{StoreDir: t.TempDir(), NoStaging: true})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	m := MountForTest(t, e, "s", "", MountOptions{})
	p := filepath.Join(m.Dir(), "f")
	w, err := openT(t, p, os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = w.WriteString("through the daemon")
	require.NoError(t, err)
	_, opens := stagedState(t, e, "s", "f")
	require.Equal(t, -1, opens, "no backing file")
	require.Equal(t, "through the daemon", read(t, p))
}

// backingFileOf returns the backing file of the file at path of session
// s, or nil when it has none.
func backingFileOf(t *testing.T, e *Engine, session, path string) *os.File {
	t.Helper()
	n := fileNodeOf(t, e, session, path)
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.data.backing == nil {
		return nil
	}
	return n.data.backing.f
}

// pooled reports whether f is in session s's pool of empty backing files.
// poolLen is how many staging files session has ready.
func poolLen(t *testing.T, e *Engine, session string) int {
	t.Helper()
	s, err := e.live(context.Background(), session)
	require.NoError(t, err)
	s.spares.mu.Lock()
	defer s.spares.mu.Unlock()
	return len(s.spares.spares)
}

// heldBackingNames returns the names of the backing files s holds: its
// nodes' and its pool's.
func heldBackingNames(s *Session) map[string]bool {
	held := map[string]bool{}
	for _, n := range s.backed.list() {
		n.mu.Lock()
		if b := n.data.backing; b != nil {
			held[b.name] = true
		}
		n.mu.Unlock()
	}
	s.spares.mu.Lock()
	for _, sp := range s.spares.spares {
		held[sp.name] = true
	}
	s.spares.mu.Unlock()
	return held
}

func pooled(t *testing.T, e *Engine, session string, f *os.File) bool {
	t.Helper()
	s, err := e.live(context.Background(), session)
	require.NoError(t, err)
	s.spares.mu.Lock()
	defer s.spares.mu.Unlock()
	for _, g := range s.spares.spares {
		if g.f == f {
			return true
		}
	}
	return false
}

// TestStagedRecycle: the staging file of a closed write-only file goes
// back, empty, into the pool and serves the next files, which hold their
// own bytes only; one a reader could map is closed instead, and its
// mapping keeps showing what it mapped.
func TestStagedRecycle(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e, m, _ := mountedFile(t, "unused")
	path := func(i int) string { return filepath.Join(m.Dir(), fmt.Sprintf("f%d", i)) }
	content := func(i int) []byte { return randBytes(uint64(100+i), 3000+1000*(i%7)) }
	absorbed := func(name string) {
		require.Eventually(t, func() bool { return backingFileOf(t, e, "s", name) == nil },
			10*time.Second, 5*time.Millisecond, "%s is absorbed after its close", name)
	}

	// A file a reader joined and mapped.
	mapped := bytes.Repeat([]byte("mapped!\n"), 1024)
	w, err := openT(t, filepath.Join(m.Dir(), "mapped"), os.O_WRONLY|os.O_CREATE, 0o644)
	require.NoError(t, err)
	_, err = w.Write(mapped)
	require.NoError(t, err)
	r, err := openT(t, filepath.Join(m.Dir(), "mapped"), os.O_RDONLY, 0)
	require.NoError(t, err)
	mappedBacking := backingFileOf(t, e, "s", "mapped")
	require.NotNil(t, mappedBacking)
	view, err := syscall.Mmap(int(r.Fd()), 0, len(mapped), syscall.PROT_READ, syscall.MAP_SHARED)
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Munmap(view) })
	require.NoError(t, w.Close())
	require.NoError(t, r.Close())
	absorbed("mapped")
	require.Never(t, func() bool { return pooled(t, e, "s", mappedBacking) },
		50*time.Millisecond, time.Millisecond, "a file a reader could map is never recycled")

	seen := map[*os.File]int{}
	recycled := 0
	for i := range 40 {
		// Each fsynced file keeps its staging file, and the pool refills in
		// the background: a create with none ready is served by the daemon
		// (TestStagedPoolEmpty), so wait for one.
		require.Eventually(t, func() bool { return poolLen(t, e, "s") > 0 },
			10*time.Second, time.Millisecond, "a staging file is ready for f%d", i)
		f, err := openT(t, path(i), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		require.NoError(t, err)
		b := backingFileOf(t, e, "s", fmt.Sprintf("f%d", i))
		require.NotNil(t, b, "f%d is staged", i)
		require.NotSame(t, mappedBacking, b)
		if _, ok := seen[b]; ok {
			recycled++
		}
		seen[b] = i
		st, err := b.Stat()
		require.NoError(t, err)
		require.Zero(t, st.Size(), "a recycled staging file starts empty")
		_, err = f.Write(content(i))
		require.NoError(t, err)
		// An fsync's stage record pins the staging file: a replay may read it.
		synced := i%4 == 3
		if synced {
			require.NoError(t, f.Sync(), "fsync of f%d", i)
		}
		require.NoError(t, f.Close())
		absorbed(fmt.Sprintf("f%d", i))
		if synced {
			require.Never(t, func() bool { return pooled(t, e, "s", b) },
				50*time.Millisecond, time.Millisecond, "f%d's named staging file is not recycled", i)
			continue
		}
		require.Eventually(t, func() bool { return pooled(t, e, "s", b) },
			10*time.Second, time.Millisecond, "f%d's staging file is back in the pool", i)
	}
	require.Greater(t, recycled, 20, "staging files are reused")
	require.Equal(t, mapped, view, "the mapping still shows the mapped file")

	_, snap := captureMount(t, e, "s")
	for i := range 40 {
		require.Equal(t, content(i), []byte(read(t, path(i))), "f%d", i)
		require.Equal(t, content(i), []byte(read(t, filepath.Join(snap, fmt.Sprintf("f%d", i)))), "f%d in the snapshot", i)
	}
}

// TestStagedPoolEmpty: with no staging file ready, a new file is served by
// the daemon rather than waiting for one, and loses nothing.
func TestStagedPoolEmpty(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e, m, p := mountedFile(t, "f")
	s, err := e.live(context.Background(), "s")
	require.NoError(t, err)
	// Fill the pool as a first new file would, but with no file written
	// whose staging file the absorber could give back meanwhile.
	s.spares.mu.Lock()
	s.spares.parked = false
	fill := s.spares.claimFill()
	s.spares.mu.Unlock()
	require.True(t, fill)
	s.fillBackingPool()
	require.Positive(t, poolLen(t, e, "s"))
	s.spares.mu.Lock()
	pool := s.spares.spares
	s.spares.spares = nil
	s.spares.filling = true // no refill meanwhile
	s.spares.mu.Unlock()

	w, err := openT(t, p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	require.NoError(t, err)
	staged, opens := stagedState(t, e, "s", "f")
	require.False(t, staged)
	require.Equal(t, -1, opens, "no backing file")
	_, err = w.WriteString("served by the daemon")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.Equal(t, "served by the daemon", read(t, p))

	s.spares.mu.Lock()
	s.spares.spares, s.spares.filling = pool, false
	s.spares.mu.Unlock()
	// A first passthrough open is served by the daemon while a RELEASE is
	// in flight in the mount (the kernel sends the ones of the closes
	// above after they returned), so try a few new files.
	for i := 0; ; i++ {
		name := fmt.Sprintf("g%d", i)
		w, err = openT(t, filepath.Join(m.Dir(), name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		require.NoError(t, err)
		staged, _ = stagedState(t, e, "s", name)
		require.NoError(t, w.Close())
		if staged {
			break
		}
		require.Less(t, i, 20, "staged again once a file is ready")
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWrittenAfterChecks: a passthrough writer is not held back by a
// flush, so between the flush's last check of its files and the drop of
// the backing files no open uses any more, a writer may write a file and
// close it. The flush keeps what it found; the file keeps every byte
// written after (its backing file is not dropped with them unread).
func TestWrittenAfterChecks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		flags int
	}{
		{"staged", os.O_WRONLY | os.O_CREATE | os.O_EXCL},
		{"appender", os.O_WRONLY | os.O_CREATE | os.O_EXCL | os.O_APPEND},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.name == "staged" {
				needStaging(t)
			}
			e, _, p := mountedFile(t, "f")
			w, err := os.OpenFile(p, tc.flags, 0o644)
			require.NoError(t, err)
			require.Equal(t, 1, backedOpens(t, e, "s", "f"), "passthrough open")
			s, err := e.live(ctx, "s")
			require.NoError(t, err)
			n := fileNodeOf(t, e, "s", "f")
			// The hook may run in the periodic flush rather than in Sync
			// below: it reports what went wrong instead of failing there.
			var once sync.Once
			var hookErr error
			hook := func() {
				once.Do(func() {
					if _, hookErr = w.WriteString("written after the checks"); hookErr != nil {
						return
					}
					if hookErr = w.Close(); hookErr != nil {
						return
					}
					// The kernel sends RELEASE after close returns.
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
						n.mu.Lock()
						released := n.data.backing == nil || n.data.backing.opens == 0
						n.mu.Unlock()
						if released {
							return
						}
						if time.Now().After(deadline) {
							hookErr = errors.New("no RELEASE after close")
							return
						}
					}
				})
			}
			s.afterChecks.Store(&hook)
			require.NoError(t, e.Sync(ctx, "s"))
			s.afterChecks.Store(nil)
			once.Do(func() {}) // a hook still running in another flush ends first
			require.NoError(t, hookErr)
			require.Equal(t, "written after the checks", read(t, p))
			_, snap := captureMount(t, e, "s")
			require.Equal(t, "written after the checks", read(t, filepath.Join(snap, "f")))
		})
	}
}

// TestUnlinkedStagedStillOpen: a staged file written in one mount,
// unlinked and closed there while a handle of another mount (served by
// the daemon) still has it open, keeps its bytes for that handle: its
// staging file is absorbed, not dropped unread.
func TestUnlinkedStagedStillOpen(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e := NewTestEngine(t, nil)
	a := MountForTest(t, e, "s", "", MountOptions{})
	b := MountForTest(t, e, "s", "", MountOptions{})
	write(t, filepath.Join(a.Dir(), "f"), "")
	n := fileNodeOf(t, e, "s", "f")
	gone := func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.data.backing == nil
	}
	// Once the first writer's staging file is absorbed, the reader is
	// served by the daemon, not passed through to a staging file.
	require.Eventually(t, gone, 10*time.Second, time.Millisecond)
	r, err := openT(t, filepath.Join(a.Dir(), "f"), os.O_RDONLY, 0)
	require.NoError(t, err)
	w, err := os.OpenFile(filepath.Join(b.Dir(), "f"), os.O_WRONLY, 0)
	require.NoError(t, err)
	staged, opens := stagedState(t, e, "s", "f")
	require.True(t, staged, "the writer of the other mount is staged")
	require.Equal(t, 1, opens)
	_, err = w.WriteString("still read")
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(b.Dir(), "f")))
	require.NoError(t, w.Close())
	require.Eventually(t, gone, 10*time.Second, time.Millisecond, "the absorber took the staging file")
	require.NoError(t, e.Sync(context.Background(), "s"))
	// Overlapping mounts cache attributes for a second: then the reader's
	// kernel asks the daemon for the size the other mount's writer made.
	time.Sleep(shortCacheTimeout + 200*time.Millisecond)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.Equal(t, "still read", string(got))
}

// TestStagedHold: a closed staged file of absorbHoldMin bytes or more
// stays staged for a while, so that a reader that opens it next reads the
// staging file through passthrough; a capture, and Sync, still take it,
// and a smaller file is absorbed at once.
func TestStagedHold(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e, m, p := mountedFile(t, "big")
	ctx := context.Background()
	s, err := e.live(ctx, "s")
	require.NoError(t, err)
	s.holdFor.Store(int64(time.Hour)) // no absorb but a flush's
	want := randBytes(7, absorbHoldMin+4321)
	require.NoError(t, os.WriteFile(p, want, 0o644))
	small := filepath.Join(m.Dir(), "small")
	require.NoError(t, os.WriteFile(small, want[:absorbHoldMin-1], 0o644))

	require.Eventually(t, func() bool {
		_, opens := stagedState(t, e, "s", "small")
		return opens == -1
	}, 10*time.Second, time.Millisecond, "a small staged file is absorbed at once")
	staged, opens := stagedState(t, e, "s", "big")
	require.True(t, staged, "a big closed file stays staged")
	require.Equal(t, 0, opens)

	readThroughBacking(t, e, p, "big", want)

	_, snap := captureMount(t, e, "s")
	require.Equal(t, want, []byte(read(t, filepath.Join(snap, "big"))))
	require.NoError(t, e.Sync(ctx, "s"))
	_, opens = stagedState(t, e, "s", "big")
	require.Equal(t, -1, opens, "a flush takes a held file as any closed one")
	require.Equal(t, want, []byte(read(t, p)))
}

// keptState reports whether the file at path of session s has a read copy
// (a kept staged file), and how many passthrough handles it has.
func keptState(t *testing.T, e *Engine, session, path string) (bool, int) {
	t.Helper()
	n := fileNodeOf(t, e, session, path)
	n.mu.Lock()
	defer n.mu.Unlock()
	if b := n.data.backing; b != nil {
		return b.kind == backingKept, b.opens
	}
	return false, -1
}

// TestStagedReadCopy: once the absorber took a big closed staged file,
// the staging file stays as the node's read copy: later readers read it
// through passthrough, flushes and captures keep it, a writer's open
// ends it, and a restore drops it.
func TestStagedReadCopy(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e, m, p := mountedFile(t, "big")
	ctx := context.Background()
	s, err := e.live(ctx, "s")
	require.NoError(t, err)
	if !s.keepRoom() {
		t.Skip("the test directory's filesystem has no room for read copies")
	}
	s.holdFor.Store(1) // absorbed at once
	want := randBytes(8, absorbHoldMin+777)
	require.NoError(t, os.WriteFile(p, want, 0o644))
	require.Eventually(t, func() bool {
		kept, _ := keptState(t, e, "s", "big")
		return kept
	}, 10*time.Second, time.Millisecond, "the absorber keeps a read copy")
	firstID, first := captureMount(t, e, "s")
	orig := append([]byte(nil), want...)
	require.NoError(t, e.Sync(ctx, "s"))
	kept, opens := keptState(t, e, "s", "big")
	require.True(t, kept, "a flush keeps a read copy")
	require.Equal(t, 0, opens)

	readThroughBacking(t, e, p, "big", want)
	kept, _ = keptState(t, e, "s", "big")
	require.True(t, kept, "a reader's close leaves the copy as it is")
	require.Equal(t, want, []byte(read(t, filepath.Join(first, "big"))))

	// A writer the daemon serves takes the content over.
	w, err := openT(t, p, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = w.WriteAt([]byte("changed"), 100)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	kept, opens = keptState(t, e, "s", "big")
	require.False(t, kept)
	require.Equal(t, -1, opens, "the daemon took the file over")
	copy(want[100:], "changed")
	require.Equal(t, want, []byte(read(t, p)))

	keptFile := func(name string) (string, *node) {
		t.Helper()
		path := filepath.Join(m.Dir(), name)
		require.NoError(t, os.WriteFile(path, want, 0o644))
		require.Eventually(t, func() bool {
			kept, _ := keptState(t, e, "s", name)
			return kept
		}, 10*time.Second, time.Millisecond, "the absorber keeps a read copy of %s", name)
		return path, fileNodeOf(t, e, "s", name)
	}
	backingGone := func(n *node) bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.data.backing == nil
	}
	// Unlinked while a reader has it open: dropped at the reader's close.
	gone, gn := keptFile("gone")
	r, err := openT(t, gone, os.O_RDONLY, 0)
	require.NoError(t, err)
	require.NoError(t, os.Remove(gone))
	require.NoError(t, r.Close())
	require.Eventually(t, func() bool { return backingGone(gn) }, 10*time.Second, time.Millisecond,
		"an unlinked read copy goes once its last reader closed")
	// A setuid file gets no passthrough: the daemon serves its reader and
	// takes the copy over.
	suid, _ := keptFile("suid")
	require.NoError(t, unix.Chmod(suid, 0o4755))
	r, err = openT(t, suid, os.O_RDONLY, 0)
	require.NoError(t, err)
	_, opens = keptState(t, e, "s", "suid")
	require.NoError(t, r.Close())
	require.Equal(t, -1, opens, "the daemon took the setuid file over")

	// A new copy, then a restore to the first capture: the old tree's
	// copy goes, and the file reads as captured.
	other := filepath.Join(m.Dir(), "other")
	require.NoError(t, os.WriteFile(other, want, 0o644))
	require.Eventually(t, func() bool {
		kept, _ := keptState(t, e, "s", "other")
		return kept
	}, 10*time.Second, time.Millisecond, "the absorber keeps a read copy")
	n := fileNodeOf(t, e, "s", "other")
	require.NoError(t, e.Restore(ctx, "s", firstID))
	n.mu.Lock()
	dropped := n.data.backing == nil
	n.mu.Unlock()
	require.True(t, dropped, "a restore drops the old tree's read copies")
	_, err = os.Stat(other)
	require.True(t, os.IsNotExist(err), "other was written after the capture")
	require.Equal(t, orig, []byte(read(t, p)))
}
