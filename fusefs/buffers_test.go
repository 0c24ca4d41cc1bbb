package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"homefs/cas"
	"homefs/internal/catalog"
)

// TestBufferBudget: while the engine's write buffers are under their
// budget, a session's stay in memory until a flush, however many files
// they hold; past it they go to the store in the background and stay
// bounded. Either way nothing written is lost.
func TestBufferBudget(t *testing.T) {
	t.Parallel()
	const files = 80 // of 1 MiB: past sessionSpillThreshold together
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
			// No staging (every write is buffered by the daemon), no
			// periodic flush (it would store the buffers).
			e := New(store, catalog.New(store), Options{StoreDir: t.TempDir(), NoStaging: true, FlushInterval: -1})
			t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
			e.buffers.budget = tc.budget
			m := MountForTest(t, e, "s", "", MountOptions{})
			s, err := e.live(context.Background(), "s")
			require.NoError(t, err)

			rng := rand.New(rand.NewPCG(7, 7))
			want := make([][]byte, files)
			for i := range want {
				want[i] = make([]byte, 1<<20)
				for j := range want[i] {
					want[i][j] = byte('a' + rng.IntN(4)) // compressible, not trivially
				}
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
