package fusefs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestKillMixedWriters kills the daemon (kill -9) at a random moment
// under writers of every kind an agent host runs at once, none of whose
// acknowledged bytes may be lost (jops.go, liveBacking): Codex's rollout
// (O_RDWR|O_APPEND, an fsync every 32 lines), Pi's transcript (open
// O_WRONLY|O_APPEND, write, close, never fsynced), config files replaced
// by temp file and rename, a file grown by pwrite past its end, a tree of
// directories and files made and removed, a `cmd > file` (staged, never
// fsynced), files written as tar writes them (staged, closed, their
// staging files recycled), and SQLite in WAL mode with synchronous=NORMAL
// (Codex's state database: a commit is a write to the WAL, no fsync).
// Three rounds, each on a new daemon over the store the last one left,
// whose periodic flush resets the journal every 300 ms.
func TestKillMixedWriters(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill times drawn with seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	d := startDurable(t, "300ms")
	var last *mixedWriters
	for round := range 3 {
		if round > 0 {
			d = d.restart(t, "300ms") // replays what the killed one left
			last.check(t, d.mnt)
		}
		last = newMixedWriters(d.mnt, round)
		done := last.start()
		time.Sleep(time.Duration(50+rng.IntN(1200)) * time.Millisecond)
		d.kill(t)
		// Writers whose writes pass through to a backing file get no
		// error until a new daemon seals it: they are told to stop, and
		// what they wrote until then counts as acknowledged.
		close(last.stop)
		<-done
		t.Logf("round %d: killed after %s", round, last.summary())
	}
	m := d.remount(t)
	last.check(t, m.Dir())
}

// mixedWriters are the writers of one round, with what each had
// acknowledged when it stopped (at its first error, once the daemon died).
type mixedWriters struct {
	dir   string
	round int
	mu    sync.Mutex
	// GUARDED_BY(mu)
	rollout, transcript []byte
	grown               []byte
	configs             int // config.json versions whose rename returned
	made                map[string][]byte
	removed             map[string]bool
	unsure              string // a removal in flight at the kill
	out                 []byte // what `cmd > file` wrote
	tarred              map[string][]byte
	rows                int // SQLite rows whose insert committed
	stop                chan struct{}
}

// stopped reports whether the writers were told to stop.
func (w *mixedWriters) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func newMixedWriters(dir string, round int) *mixedWriters {
	return &mixedWriters{dir: dir, round: round, made: map[string][]byte{}, removed: map[string]bool{}, tarred: map[string][]byte{}, stop: make(chan struct{})}
}

func (w *mixedWriters) path(name string) string {
	return filepath.Join(w.dir, fmt.Sprintf("r%d", w.round), name)
}

func (w *mixedWriters) start() <-chan struct{} {
	done := make(chan struct{})
	_ = os.MkdirAll(w.path("tree"), 0o755)
	_ = os.MkdirAll(w.path("tar"), 0o755)
	var wg sync.WaitGroup
	for _, f := range []func(){w.codex, w.pi, w.config, w.grow, w.tree, w.staged, w.untar, w.sqlite} {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

func (w *mixedWriters) codex() {
	f, err := os.OpenFile(w.path("rollout.jsonl"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return
	}
	defer f.Close()
	for i := 0; !w.stopped(); i++ {
		line := fmt.Appendf(nil, "{\"type\":\"response_item\",\"n\":%d,\"pad\":%q}\n", i, bytes.Repeat([]byte("x"), i%700))
		if _, err := f.Write(line); err != nil {
			return
		}
		w.mu.Lock()
		w.rollout = append(w.rollout, line...)
		w.mu.Unlock()
		if i%32 == 31 && f.Sync() != nil {
			return
		}
	}
}

func (w *mixedWriters) pi() {
	for i := 0; !w.stopped(); i++ {
		f, err := os.OpenFile(w.path("pi.jsonl"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return
		}
		line := fmt.Appendf(nil, "{\"type\":\"message\",\"id\":%d}\n", i)
		_, err = f.Write(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return
		}
		w.mu.Lock()
		w.transcript = append(w.transcript, line...)
		w.mu.Unlock()
	}
}

func (w *mixedWriters) config() {
	for i := 1; !w.stopped(); i++ {
		tmp := w.path(fmt.Sprintf("config.json.%d", i))
		if createServed(tmp, fmt.Appendf(nil, "{\"version\":%d}", i), 0o644) != nil || os.Rename(tmp, w.path("config.json")) != nil {
			return
		}
		w.mu.Lock()
		w.configs = i
		w.mu.Unlock()
	}
}

// createServed makes a new file p holding data through O_RDWR (which the
// daemon serves; a write-only open would stage it).
func createServed(p string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

func (w *mixedWriters) grow() {
	f, err := os.OpenFile(w.path("grown"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	for i := 0; !w.stopped(); i++ {
		block := randBytes(uint64(1000*w.round+i), 3000)
		off := int64(i) * 5000 // a hole between blocks
		if _, err := f.WriteAt(block, off); err != nil {
			return
		}
		w.mu.Lock()
		w.grown = append(w.grown, make([]byte, off-int64(len(w.grown)))...)
		w.grown = append(w.grown, block...)
		w.mu.Unlock()
	}
}

func (w *mixedWriters) tree() {
	for i := 0; !w.stopped(); i++ {
		dir := fmt.Sprintf("tree/d%d", i/10)
		if i%10 == 0 && os.Mkdir(w.path(dir), 0o755) != nil {
			return
		}
		name := fmt.Sprintf("%s/f%d", dir, i)
		data := randBytes(uint64(7000*w.round+i), 100+i%5000)
		if createServed(w.path(name), data, 0o640) != nil {
			return
		}
		w.mu.Lock()
		w.made[name] = data
		w.mu.Unlock()
		if i%3 == 2 {
			gone := fmt.Sprintf("tree/d%d/f%d", (i-1)/10, i-1)
			err := os.Remove(w.path(gone))
			w.mu.Lock()
			// A removal that failed as the daemon died may have taken
			// place all the same: either outcome is right.
			w.removed[gone] = err == nil
			if err != nil {
				w.unsure = gone
			}
			w.mu.Unlock()
			if err != nil {
				return
			}
		}
	}
}

// staged writes as `cmd > file` does: a write-only, truncating open
// (staged), written and never fsynced.
func (w *mixedWriters) staged() {
	f, err := os.OpenFile(w.path("out.log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	for i := 0; !w.stopped(); i++ {
		line := fmt.Appendf(nil, "build step %d %s\n", i, bytes.Repeat([]byte("y"), i%300))
		if _, err := f.Write(line); err != nil {
			return
		}
		w.mu.Lock()
		w.out = append(w.out, line...)
		w.mu.Unlock()
	}
}

// untar writes small files as tar does: a new file opened write-only
// (staged), written, its mode set, closed; the absorber recycles their
// staging files for the next ones.
func (w *mixedWriters) untar() {
	for i := 0; !w.stopped(); i++ {
		name := fmt.Sprintf("tar/f%d", i)
		data := randBytes(uint64(9000*w.round+i), 1+i*131%20000)
		f, err := os.OpenFile(w.path(name), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return
		}
		_, err = f.Write(data)
		if err == nil {
			err = f.Chmod(0o644)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return
		}
		w.mu.Lock()
		w.tarred[name] = data
		w.mu.Unlock()
	}
}

// sqlite inserts one row per sqlite3 process into a database in WAL mode
// with synchronous=NORMAL: a commit that returned is a write to the WAL,
// never fsynced.
func (w *mixedWriters) sqlite() {
	if _, err := exec.LookPath("sqlite3"); err != nil {
		return
	}
	for i := 1; !w.stopped(); i++ {
		sql := fmt.Sprintf("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE IF NOT EXISTS t(n INTEGER, pad BLOB); INSERT INTO t VALUES(%d, randomblob(%d));", i, 100+i%900)
		if exec.Command("sqlite3", w.path("state.sqlite"), sql).Run() != nil {
			return
		}
		w.mu.Lock()
		w.rows = i
		w.mu.Unlock()
	}
}

// checkStaged finds what the staged writers and SQLite acknowledged.
// Called with w.mu held.
func (w *mixedWriters) checkStaged(t *testing.T, at func(string) string) {
	t.Helper()
	got, err := os.ReadFile(at("out.log"))
	if err == nil || len(w.out) > 0 {
		require.NoError(t, err)
		require.True(t, isPrefix(w.out, got), "out.log: %d bytes, acknowledged %d", len(got), len(w.out))
	}
	for name, want := range w.tarred {
		got, err := os.ReadFile(at(name))
		require.NoError(t, err, name)
		require.True(t, bytes.Equal(want, got), "%s: %d bytes, want %d", name, len(got), len(want))
	}
	if w.rows == 0 {
		return
	}
	out, err := exec.Command("sqlite3", at("state.sqlite"), "PRAGMA integrity_check; SELECT max(n) FROM t;").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var ok string
	var max int
	_, err = fmt.Sscanf(string(out), "%s\n%d", &ok, &max)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok", ok, "integrity_check")
	require.GreaterOrEqual(t, max, w.rows, "every committed row is there")
}

// check finds every acknowledged change in the session under dir, a
// restarted daemon's mount: appended files hold what was acknowledged,
// and perhaps more after it.
func (w *mixedWriters) check(t *testing.T, dir string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	at := func(name string) string { return filepath.Join(dir, fmt.Sprintf("r%d", w.round), name) }
	for name, want := range map[string][]byte{"rollout.jsonl": w.rollout, "pi.jsonl": w.transcript} {
		got, err := os.ReadFile(at(name))
		if len(want) == 0 && os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err, name)
		// More may follow: a write in flight at the kill, which the
		// kernel may have sent in several requests.
		require.True(t, isPrefix(want, got), "%s: %d bytes, acknowledged %d", name, len(got), len(want))
	}
	got, err := os.ReadFile(at("grown"))
	if err == nil || len(w.grown) > 0 {
		require.NoError(t, err)
		require.True(t, isPrefix(w.grown, got), "grown: %d bytes, acknowledged %d", len(got), len(w.grown))
	}
	if w.configs > 0 {
		var v int
		b, err := os.ReadFile(at("config.json"))
		require.NoError(t, err)
		_, err = fmt.Sscanf(string(b), "{\"version\":%d}", &v)
		require.NoError(t, err, "config.json: %q", b)
		require.GreaterOrEqual(t, v, w.configs, "config.json is the last version renamed, or later")
	}
	for name, want := range w.made {
		got, err := os.ReadFile(at(name))
		if w.removed[name] {
			require.True(t, os.IsNotExist(err), "%s was removed", name)
			continue
		}
		if name == w.unsure && os.IsNotExist(err) {
			continue
		}
		require.NoError(t, err, name)
		require.True(t, bytes.Equal(want, got), "%s: %d bytes, want %d", name, len(got), len(want))
		var st unix.Stat_t
		require.NoError(t, unix.Stat(at(name), &st))
		require.Equal(t, uint32(0o640), st.Mode&0o777, name)
	}
	w.checkStaged(t, at)
}

func (w *mixedWriters) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("rollout %d B, transcript %d B, grown %d B, %d configs, %d files made, %d removed, out.log %d B, %d tarred, %d rows",
		len(w.rollout), len(w.transcript), len(w.grown), w.configs, len(w.made), len(w.removed), len(w.out), len(w.tarred), w.rows)
}
