package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
)

// TestBufferBudget: while the engine's write buffers are under their
// budget, a session's stay in memory until a flush, however many files
// they hold; past it they go to the store in the background and stay
// bounded. Either way nothing written is lost.
func TestBufferBudget(t *testing.T) {
	t.Parallel()
	const files = 68 // of 1 MiB: past sessionSpillThreshold together
	for _, tc := range []struct {
		name    string
		budget  int64
		spilled bool
	}{
		{"under the budget", 1 << 40, false},
		{"past the budget", sessionSpillThreshold, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := cas.NewMemory()
			// No store directory: no staging (every write is buffered by
			// the daemon) and no journal (a full one flushes, every 64 MiB
			// of writes); no periodic flush (it would store the buffers).
			e := New(store, catalog.New(store), Options{FlushInterval: -1})
			t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
			e.buffers.budget = tc.budget
			m := MountForTest(t, e, "s", "", MountOptions{})
			s, err := e.live(context.Background(), "s")
			require.NoError(t, err)

			want := mebibyteFiles(files, 7)
			for i := range want {
				require.NoError(t, os.WriteFile(filepath.Join(m.Dir(), fmt.Sprint(i)), want[i], 0o644))
			}
			if tc.spilled {
				require.Eventually(t, func() bool { return s.dirtyBytes.Load() < sessionSpillThreshold }, 20*time.Second, 10*time.Millisecond,
					"the buffers went to the store")
			} else {
				require.GreaterOrEqual(t, s.dirtyBytes.Load(), int64(files<<20), "the buffers wait for a flush")
			}
			require.Equal(t, s.dirtyBytes.Load(), e.buffers.total.Load())
			for i := range want {
				got, err := os.ReadFile(filepath.Join(m.Dir(), fmt.Sprint(i)))
				require.NoError(t, err)
				require.True(t, bytes.Equal(want[i], got), "file %d", i)
			}
			require.NoError(t, e.Sync(context.Background(), "s"))
			require.Zero(t, e.buffers.total.Load(), "a flush stores every buffer")
		})
	}
}

// TestSpillDuringCaptures: captures taken while a writer keeps the
// engine's buffers past their budget (so spills run in the background, a
// step at a time, between the captures' flushes) each hold every file
// closed before them whole, and any other file as a prefix of its bytes.
func TestSpillDuringCaptures(t *testing.T) {
	t.Parallel()
	const files = 68 // of 1 MiB, past sessionSpillThreshold together
	store := cas.NewMemory()
	e := New(store, catalog.New(store), Options{StoreDir: t.TempDir(), NoStaging: true, FlushInterval: -1})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	e.buffers.budget = sessionSpillThreshold
	m := MountForTest(t, e, "s", "", MountOptions{})

	want := mebibyteFiles(files, 9)
	type snap struct {
		id     string
		closed int // files whose write returned before the capture began
	}
	var (
		snaps   []snap
		written atomic.Int64
		done    = make(chan struct{})
	)
	go func() {
		defer close(done)
		for i := range want {
			if err := os.WriteFile(filepath.Join(m.Dir(), fmt.Sprint(i)), want[i], 0o644); err != nil {
				t.Error(err)
				return
			}
			written.Store(int64(i + 1))
		}
	}()
	// A capture each time the writer has closed 8 more files, and one at
	// the end: a dozen or so, each mounted below.
	for last := -8; ; {
		finished := false
		select {
		case <-done:
			finished = true
		case <-time.After(time.Millisecond):
		}
		closed := int(written.Load())
		if closed-last < 8 && !finished {
			continue
		}
		last = closed
		_, id, err := e.Capture(context.Background(), "s", "", nil)
		require.NoError(t, err)
		snaps = append(snaps, snap{id, closed})
		if finished {
			break
		}
	}
	require.Greater(t, len(snaps), 2, "captures raced the writer")
	// Each snapshot is checked from the files the one before held whole
	// (the last one from the first file): reading every file of every
	// snapshot would be quadratic.
	for k, sn := range snaps {
		dir := mountSnapshot(t, e, sn.id)
		from := 0
		if k > 0 && k < len(snaps)-1 {
			from = snaps[k-1].closed
		}
		for i := from; i < len(want); i++ {
			got, err := os.ReadFile(filepath.Join(dir, fmt.Sprint(i)))
			if i < sn.closed {
				require.NoError(t, err, "snapshot %s, file %d", sn.id, i)
				require.True(t, bytes.Equal(want[i], got), "snapshot %s holds file %d whole", sn.id, i)
				continue
			}
			if err == nil {
				require.True(t, bytes.HasPrefix(want[i], got), "snapshot %s holds a prefix of file %d", sn.id, i)
			}
		}
	}
}

// mebibyteFiles returns n distinct files of 1 MiB, compressible but not
// trivially, from seed.
func mebibyteFiles(n int, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	base := make([]byte, 1<<20)
	for j := 0; j < len(base); j += 8 {
		v := rng.Uint64()
		for k := range 8 {
			base[j+k] = byte('a' + (v>>(8*k))&3)
		}
	}
	files := make([][]byte, n)
	for i := range files {
		files[i] = bytes.Clone(base)
		for j := 0; j < len(base); j += 4096 {
			copy(files[i][j:], fmt.Sprintf("%d/%d", i, j)) // no two chunks alike
		}
	}
	return files
}

// TestCgroupMemoryLimit: the limit of the daemon's cgroup, v1 or v2, as
// /proc/self/cgroup names it.
func TestCgroupMemoryLimit(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(rel, content string) {
		p := filepath.Join(root, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	write("agents/a/memory.max", "2147483648\n")
	write("agents/b/memory.max", "max\n")
	write("memory/box/memory.limit_in_bytes", "1073741824\n")
	for _, tc := range []struct {
		name, self string
		limit      int64
		found      bool
	}{
		{"v2", "0::/agents/a\n", 2 << 30, true},
		{"v2 without a limit", "0::/agents/b\n", 0, false},
		{"v1 memory controller", "12:pids:/box\n4:memory:/box\n0::/\n", 1 << 30, true},
		{"v1 joint controllers", "4:cpu,memory:/box\n", 1 << 30, true},
		{"no such cgroup", "0::/gone\n", 0, false},
		{"garbage", "not a cgroup line", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			limit, found := cgroupMemoryLimit(tc.self, root)
			require.Equal(t, tc.found, found)
			require.Equal(t, tc.limit, limit)
		})
	}
}

// TestBufferBudgetBounds: the budget is a sixteenth of the memory the
// daemon may use, within its bounds.
func TestBufferBudgetBounds(t *testing.T) {
	t.Parallel()
	mem, ok := memoryLimit()
	require.True(t, ok, "the machine's memory is known")
	require.Greater(t, mem, int64(0))
	got := bufferBudget()
	require.GreaterOrEqual(t, got, int64(sessionSpillThreshold))
	require.LessOrEqual(t, got, int64(1<<30))
	require.Equal(t, min(max(mem/16, sessionSpillThreshold), 1<<30), got)
}
