package fusefs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/testkit/loopfs"
)

// parkedNames lists the parked directory of storeDir.
func parkedNames(t *testing.T, storeDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(storeDir, parkedDirName))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// readCounted reads name whole through one descriptor and returns the
// content, whether the open passed through to a read copy, and how many
// READ requests the daemon served meanwhile (obs counts them).
func readCounted(t *testing.T, e *Engine, m *Mount, obs *opCounter, name string) ([]byte, bool, int64) {
	t.Helper()
	before := obs.n[OpRead].Load()
	handles := openHandles(t, e, name)
	r, err := openT(t, filepath.Join(m.Dir(), name), os.O_RDONLY, 0)
	require.NoError(t, err)
	kept, opens := keptState(t, e, "s", name)
	got, err := io.ReadAll(r)
	require.NoError(t, err)
	require.NoError(t, r.Close())
	released(t, e, m, name, handles)
	return got, kept && opens == 1, obs.n[OpRead].Load() - before
}

// openHandles counts the handles of name open in session "s", in every
// mount.
func openHandles(t *testing.T, e *Engine, name string) int {
	t.Helper()
	n := fileNodeOf(t, e, "s", name)
	n.sess.open.mu.Lock()
	defer n.sess.open.mu.Unlock()
	return n.sess.open.nodes[n]
}

// released waits for the kernel's RELEASE of a close of name in m to be
// served, until handles are left open: a passthrough open waits for the
// releases in flight (openRoute), and a copy a handle uses is not parked.
func released(t *testing.T, e *Engine, m *Mount, name string, handles int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return openHandles(t, e, name) == handles && m.releasing.Load() == 0
	}, 10*time.Second, time.Millisecond)
}

// parkedRig restarts engines over one store and store directory, as a
// daemon restarts; e and m are the running engine and its mount of "s".
type parkedRig struct {
	t     *testing.T
	store cas.Store
	dir   string
	obs   *opCounter
	e     *Engine
	m     *Mount
}

// newParkedRig starts the first engine, or skips the test where there can
// be no read copies.
func newParkedRig(t *testing.T) *parkedRig {
	t.Helper()
	return newParkedRigIn(t, t.TempDir())
}

// newParkedRigIn is newParkedRig with the store directory dir.
func newParkedRigIn(t *testing.T, dir string) *parkedRig {
	t.Helper()
	needStaging(t)
	r := &parkedRig{t: t, store: cas.NewMemory(), dir: dir, obs: &opCounter{}}
	// A restart seals what the daemon before left in the backing
	// directory (sealBackingDir), which the last engine does not remove.
	t.Cleanup(func() { unsealBackings(t, r.dir) })
	if !hasRoom(r.dir) {
		t.Skip("the test directory's filesystem has no room for read copies")
	}
	r.start()
	return r
}

// start starts an engine and mounts "s", which nobody may read too.
func (r *parkedRig) start() {
	t := r.t
	t.Helper()
	r.e = New(r.store, catalog.New(r.store), Options{StoreDir: r.dir, FlushInterval: -1, Observer: r.obs,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	r.m = MountForTest(t, r.e, "s", "", MountOptions{AllowOther: true})
	// t.TempDir makes its directories 0700; let nobody reach the mount.
	for p := filepath.Dir(r.m.Dir()); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
}

// restart stops the engine (its close parks what it can) and starts
// another.
func (r *parkedRig) restart() {
	r.t.Helper()
	require.NoError(r.t, r.e.Close(context.Background()))
	r.start()
}

// writeKept writes a new file name with content want and waits for the
// absorber to keep it as a read copy; it returns the content's key.
func (r *parkedRig) writeKept(name string, want []byte) string {
	t := r.t
	t.Helper()
	ctx := context.Background()
	s, err := r.e.live(ctx, "s")
	require.NoError(t, err)
	s.holdFor.Store(1) // absorbed at once
	require.NoError(t, os.WriteFile(filepath.Join(r.m.Dir(), name), want, 0o644))
	require.Eventually(t, func() bool {
		kept, _ := keptState(t, r.e, "s", name)
		return kept
	}, 10*time.Second, time.Millisecond, "the absorber keeps a read copy")
	require.NoError(t, r.e.Sync(ctx, "s"))
	n := fileNodeOf(t, r.e, "s", name)
	n.mu.Lock()
	refs, ok, err := n.storedRefs(ctx)
	n.mu.Unlock()
	require.NoError(t, err)
	require.True(t, ok)
	return contentKey(int64(len(want)), refs)
}

// parkBig writes "big", size random bytes from seed, kept as a read copy,
// and restarts the engine, which parks it; it returns the content and
// its key.
func (r *parkedRig) parkBig(seed uint64, size int) ([]byte, string) {
	r.t.Helper()
	want := randBytes(seed, size)
	key := r.writeKept("big", want)
	r.restart()
	require.Equal(r.t, []string{key}, parkedNames(r.t, r.dir))
	return want, key
}

// read reads name whole, as readCounted does.
func (r *parkedRig) read(name string) ([]byte, bool, int64) {
	r.t.Helper()
	return readCounted(r.t, r.e, r.m, r.obs, name)
}

// TestParkedReadCopy: a read copy outlives its daemon. A clean close
// parks it under its content's key; the next daemon's reader of that
// content, an unprivileged one where the test can switch users, checks it
// and reads it through passthrough (no READ reaches the daemon), and it is
// parked again at the next close.
func TestParkedReadCopy(t *testing.T) {
	t.Parallel()
	r := newParkedRig(t)
	want := randBytes(11, 3*absorbHoldMin+777)
	require.NoError(t, os.WriteFile(filepath.Join(r.m.Dir(), "small"), want[:4096], 0o644))
	require.Eventually(t, func() bool { return absorbedState(t, r.e, "s", "small") }, 10*time.Second, time.Millisecond)
	key := r.writeKept("big", want)
	r.restart()
	require.Equal(t, []string{key}, parkedNames(t, r.dir), "the read copy of big, not small")

	// While a writer has the file open in another mount of the session,
	// the daemon serves the reader and the copy stays parked.
	m2 := MountForTest(t, r.e, "s", "", MountOptions{})
	w, err := openT(t, filepath.Join(m2.Dir(), "big"), os.O_RDWR, 0)
	require.NoError(t, err)
	got, passed, _ := r.read("big")
	require.Equal(t, want, got)
	require.False(t, passed, "a writer elsewhere")
	require.Equal(t, []string{key}, parkedNames(t, r.dir))
	require.NoError(t, w.Close())
	released(t, r.e, m2, "big", 0)
	require.NoError(t, m2.Unmount())

	if os.Geteuid() == 0 {
		needTool(t, "setpriv")
		before := r.obs.n[OpRead].Load()
		out, err := asNobody(t, r.m.Dir(), "sha256sum big")
		require.NoError(t, err, out)
		require.Equal(t, fmt.Sprintf("%x  big", sha256.Sum256(want)), out)
		released(t, r.e, r.m, "big", 0)
		kept, _ := keptState(t, r.e, "s", "big")
		require.True(t, kept, "nobody's reader adopted the copy")
		require.Equal(t, before, r.obs.n[OpRead].Load(), "and read it through passthrough")
	}
	got, passed, reads := r.read("big")
	require.Equal(t, want, got)
	require.True(t, passed, "the reader reads the adopted copy")
	require.Zero(t, reads)
	require.Empty(t, parkedNames(t, r.dir), "adopted, the copy left the parked directory")
	got, passed, _ = r.read("big")
	require.Equal(t, want, got)
	require.True(t, passed, "the next reader too")
	r.restart()
	require.Equal(t, []string{key}, parkedNames(t, r.dir), "parked again")
}

// TestParkedCopyRefused: a copy damaged while parked is refused and
// removed, and the daemon serves the reader from the store; a file changed
// since its copy was parked is not given it, and the copy stays.
func TestParkedCopyRefused(t *testing.T) {
	t.Parallel()
	r := newParkedRig(t)
	want, key := r.parkBig(12, 2*absorbHoldMin+5)
	p := filepath.Join(r.dir, parkedDirName, key)
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = f.WriteAt([]byte{want[absorbHoldMin] ^ 1}, absorbHoldMin)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	got, passed, reads := r.read("big")
	require.Equal(t, want, got)
	require.False(t, passed)
	require.NotZero(t, reads)
	require.Empty(t, parkedNames(t, r.dir), "a damaged copy is removed")

	// A new file, kept and parked; then changed after the park.
	require.NoError(t, os.Remove(filepath.Join(r.m.Dir(), "big")))
	require.Equal(t, key, r.writeKept("big", want))
	r.restart()
	require.Equal(t, []string{key}, parkedNames(t, r.dir))
	w, err := openT(t, filepath.Join(r.m.Dir(), "big"), os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = w.WriteAt([]byte("changed"), 100)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	released(t, r.e, r.m, "big", 0)
	require.NoError(t, r.e.Sync(context.Background(), "s"))
	copy(want[100:], "changed")
	got, passed, _ = r.read("big")
	require.Equal(t, want, got)
	require.False(t, passed)
	require.Equal(t, []string{key}, parkedNames(t, r.dir), "another content's copy stays")
	require.NoError(t, r.e.Close(context.Background()))
}

// TestParkedPrune: the index lists the copies its directory holds under a
// key, removes anything else, keeps the most recently parked within
// parkedMax bytes, and answers by size and by key.
func TestParkedPrune(t *testing.T) {
	t.Parallel()
	storeDir := t.TempDir()
	dir := filepath.Join(storeDir, parkedDirName)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "subdir"), 0o700))
	key := func(i int) string { return contentKey(int64(i), nil) }
	// Sparse files: parkedMax counts sizes, not blocks. Each is parked
	// (renamed in) a moment after the one before, which its ctime shows.
	sizes := []int64{parkedMax / 2, parkedMax / 2, parkedMax/2 - 5, 5}
	for i, size := range sizes {
		p := filepath.Join(storeDir, fmt.Sprint(i))
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		require.NoError(t, os.Truncate(p, size))
		require.NoError(t, os.Rename(p, filepath.Join(dir, key(i))))
		time.Sleep(10 * time.Millisecond)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "not-a-key"), []byte("x"), 0o600))
	if !hasRoom(dir) {
		t.Skip("the test directory's filesystem has no room for parked copies")
	}
	p := openParked(storeDir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	// The newest first: 5 bytes, then parkedMax/2-5 and parkedMax/2,
	// exactly parkedMax; the oldest goes.
	require.ElementsMatch(t, []string{key(1), key(2), key(3)}, parkedNames(t, storeDir))
	require.True(t, p.hasSize(5))
	require.True(t, p.hasSize(parkedMax/2))
	require.False(t, p.hasSize(6))
	require.True(t, p.has(key(3)))
	require.False(t, p.has(key(0)))

	require.True(t, p.take(key(3)))
	require.False(t, p.has(key(3)))
	require.False(t, p.hasSize(5), "taken, its size is gone too")
	require.False(t, p.take(key(3)), "taken once")
	p.putBack(key(3), 5)
	require.True(t, p.has(key(3)))
	require.True(t, p.hasSize(5))
	var nilIndex *parkedCopies
	require.False(t, nilIndex.hasSize(5), "no store directory, no copies")

	// A copy over the bound goes, and only it: an older one that fits
	// stays.
	storeDir = t.TempDir()
	dir = filepath.Join(storeDir, parkedDirName)
	require.NoError(t, os.MkdirAll(dir, 0o700))
	for i, size := range []int64{1 << 20, parkedMax + 1} {
		p := filepath.Join(dir, key(10+i))
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		require.NoError(t, os.Truncate(p, size))
		time.Sleep(10 * time.Millisecond)
	}
	p = openParked(storeDir, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.Equal(t, []string{key(10)}, parkedNames(t, storeDir))
	require.True(t, p.has(key(10)))
}

// TestParkedDiskFull: parked copies give way to a filling disk. With less
// than keptFreeMin of the store directory's filesystem free, a clean close
// leaves no copy behind, parked or in the backing directory, an engine
// that starts removes the copies parked before, and every file reads
// right, from the store; once there is room again, copies are parked
// again, and a disk that fills while the daemon runs gets their room
// back.
func TestParkedDiskFull(t *testing.T) {
	t.Parallel()
	dir := loopfs.Ext4(t, 64<<20, "")
	r := newParkedRigIn(t, dir)
	want := randBytes(14, 2*absorbHoldMin+9)
	keyA := r.writeKept("a", want)
	r.restart()
	require.Equal(t, []string{keyA}, parkedNames(t, dir))

	// The disk fills while "a" is parked: the next start drops it.
	ballast := fillBelowRoom(t, dir)
	r.restart()
	require.Empty(t, parkedNames(t, dir), "no room: the start removes the parked copies")
	got, passed, reads := r.read("a")
	require.Equal(t, want, got)
	require.False(t, passed)
	require.NotZero(t, reads, "read from the store")

	// A copy kept while there was room, closed when there is none.
	require.NoError(t, os.Remove(ballast))
	wantB := randBytes(15, 2*absorbHoldMin+11)
	keyB := r.writeKept("b", wantB)
	ballast = fillBelowRoom(t, dir)
	r.restart()
	require.Empty(t, parkedNames(t, dir), "no room: the close parks nothing")
	requireNoCopyOfSize(t, backingDir(dir, "s"), int64(len(wantB)))
	got, passed, _ = r.read("b")
	require.Equal(t, wantB, got)
	require.False(t, passed)

	// Room again: b's next read copy is parked at the next close.
	require.NoError(t, os.Remove(ballast))
	require.NoError(t, os.Remove(filepath.Join(r.m.Dir(), "b")))
	require.Equal(t, keyB, r.writeKept("b", wantB))
	r.restart()
	require.Equal(t, []string{keyB}, parkedNames(t, dir))

	// The disk fills while the daemon runs: the flusher's check
	// (dropIfFull) removes the parked copies.
	fillBelowRoom(t, dir)
	r.e.parked.dropIfFull()
	require.Empty(t, parkedNames(t, dir))
	require.NoError(t, r.e.Close(context.Background()))
}

// fillBelowRoom allocates a file in dir that leaves its filesystem with
// half of keptFreeMin free, and returns its path.
func fillBelowRoom(t *testing.T, dir string) string {
	t.Helper()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	leave := int64(keptFreeMin / 2 * float64(st.Blocks))
	p := filepath.Join(dir, "ballast")
	f, err := os.Create(p)
	require.NoError(t, err)
	require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, (int64(st.Bavail)-leave)*st.Bsize))
	require.NoError(t, f.Close())
	require.False(t, hasRoom(dir))
	return p
}

// requireNoCopyOfSize fails if dir (a backing directory) holds a file of
// size bytes.
func requireNoCopyOfSize(t *testing.T, dir string, size int64) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return
	}
	require.NoError(t, err)
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		require.NotEqual(t, size, info.Size(), "a copy left in the backing directory: %s", e.Name())
	}
}

// TestParkedClaim: a parked copy is claimed (renamed into the backing
// directory) before it is checked, and checked with no lock held. While
// the check waits, a flush of the session and a mkdir in its mount run
// (the open held the session's freeze before), and a copy parked under
// the same key meanwhile is another file: the reader reads the claimed
// one, and the other stays parked.
func TestParkedClaim(t *testing.T) {
	t.Parallel()
	r := newParkedRig(t)
	want, key := r.parkBig(16, 2*absorbHoldMin+3)
	s, err := r.e.live(context.Background(), "s")
	require.NoError(t, err)
	other := bytes.Repeat([]byte{'X'}, len(want))
	done := make(chan error, 1)
	hook := func() {
		done <- func() error {
			if err := os.WriteFile(filepath.Join(r.dir, parkedDirName, key), other, 0o600); err != nil {
				return err
			}
			ran := make(chan error, 1)
			go func() {
				if err := os.Mkdir(filepath.Join(r.m.Dir(), "made"), 0o755); err != nil {
					ran <- err
					return
				}
				ran <- r.e.Sync(context.Background(), "s")
			}()
			select {
			case err := <-ran:
				return err
			case <-time.After(10 * time.Second):
				return errors.New("a mkdir and a flush waited for the check")
			}
		}()
	}
	s.afterClaim.Store(&hook)
	got, passed, reads := r.read("big")
	s.afterClaim.Store(nil)
	require.NoError(t, <-done)
	require.Equal(t, want, got)
	require.True(t, passed, "the claimed copy adopted")
	require.Zero(t, reads)
	parked, err := os.ReadFile(filepath.Join(r.dir, parkedDirName, key))
	require.NoError(t, err)
	require.Equal(t, other, parked, "the copy parked after the claim stays")
	require.NoError(t, r.e.Close(context.Background()))
}

// TestParkedRemoveSession: removing a session whose journal still holds
// records (a change since the last flush) leaves none of its read copies
// in the backing directory: the journal goes with the session, so its
// copies are parked or removed as at a clean close.
func TestParkedRemoveSession(t *testing.T) {
	t.Parallel()
	r := newParkedRig(t)
	want := randBytes(17, 2*absorbHoldMin+1)
	key := r.writeKept("big", want)
	require.NoError(t, os.Mkdir(filepath.Join(r.m.Dir(), "since"), 0o755))
	require.NoError(t, r.m.Unmount())
	require.NoError(t, r.e.RemoveSession(context.Background(), "s"))
	requireNoCopyOfSize(t, backingDir(r.dir, "s"), int64(len(want)))
	require.Equal(t, []string{key}, parkedNames(t, r.dir))
	require.NoError(t, r.e.Close(context.Background()))
}
