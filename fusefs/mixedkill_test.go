package fusefs

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
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
// by temp file and rename, a file grown by pwrite past its end, and a
// tree of directories and files made and removed. Three rounds, each on a
// new daemon over the store the last one left.
func TestKillMixedWriters(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 9))
	d := startDurable(t)
	var last *mixedWriters
	for round := range 3 {
		if round > 0 {
			d = d.restart(t) // replays what the killed one left
			last.check(t, d.mnt)
		}
		last = newMixedWriters(d.mnt, round)
		done := last.start()
		time.Sleep(time.Duration(50+rng.IntN(400)) * time.Millisecond)
		d.kill(t)
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
}

func newMixedWriters(dir string, round int) *mixedWriters {
	return &mixedWriters{dir: dir, round: round, made: map[string][]byte{}, removed: map[string]bool{}}
}

func (w *mixedWriters) path(name string) string {
	return filepath.Join(w.dir, fmt.Sprintf("r%d", w.round), name)
}

func (w *mixedWriters) start() <-chan struct{} {
	done := make(chan struct{})
	_ = os.MkdirAll(w.path("tree"), 0o755)
	var wg sync.WaitGroup
	for _, f := range []func(){w.codex, w.pi, w.config, w.grow, w.tree} {
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
	for i := 0; ; i++ {
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
	for i := 0; ; i++ {
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
	for i := 1; ; i++ {
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
	for i := 0; ; i++ {
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
	for i := 0; ; i++ {
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
			if os.Remove(w.path(gone)) != nil {
				return
			}
			w.mu.Lock()
			w.removed[gone] = true
			w.mu.Unlock()
		}
	}
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
		require.NoError(t, err, name)
		require.True(t, bytes.Equal(want, got), "%s: %d bytes, want %d", name, len(got), len(want))
		var st unix.Stat_t
		require.NoError(t, unix.Stat(at(name), &st))
		require.Equal(t, uint32(0o640), st.Mode&0o777, name)
	}
}

func (w *mixedWriters) summary() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("rollout %d B, transcript %d B, grown %d B, %d configs, %d files made, %d removed",
		len(w.rollout), len(w.transcript), len(w.grown), w.configs, len(w.made), len(w.removed))
}
