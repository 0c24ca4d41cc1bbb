package fusefs

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// periodicMount mounts session "s" of an engine that flushes every 50 ms,
// over a store of its own.
func periodicMount(t *testing.T) (*Engine, cas.Store, *catalog.Catalog, *Mount) {
	t.Helper()
	store := cas.NewMemory()
	cat := catalog.New(store)
	e := New(store, cat, Options{
		StoreDir:      t.TempDir(),
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		FlushInterval: 50 * time.Millisecond,
	})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	return e, store, cat, MountForTest(t, e, "s", "", MountOptions{})
}

// TestPeriodicFlush: changes nobody fsynced reach the durable session head
// within the flush interval, as on ext4.
func TestPeriodicFlush(t *testing.T) {
	t.Parallel()
	_, store, cat, m := periodicMount(t)
	ctx := context.Background()
	before, err := cat.Head(ctx, "s")
	require.NoError(t, err)

	require.NoError(t, os.WriteFile(filepath.Join(m.Dir(), "never-fsynced"), []byte("pi appends"), 0o644))
	require.Eventually(t, func() bool {
		h, err := cat.Head(ctx, "s")
		require.NoError(t, err)
		if h.Root == before.Root {
			return false
		}
		found := false
		require.NoError(t, manifest.Walk(ctx, store, h.Root, func(p string, e *manifest.Entry) error {
			found = found || (p == "never-fsynced" && e.Size == int64(len("pi appends")))
			return nil
		}))
		return found
	}, 5*time.Second, 20*time.Millisecond, "the head never took the unsynced write")
}

// TestPeriodicFlushAppender: what a passthrough appender wrote, which the
// daemon never saw, reaches the durable head within the flush interval
// too, whether the appender is still open or closed.
func TestPeriodicFlushAppender(t *testing.T) {
	t.Parallel()
	for _, closed := range []bool{false, true} {
		t.Run(map[bool]string{false: "open", true: "closed"}[closed], func(t *testing.T) {
			t.Parallel()
			e, store, cat, m := periodicMount(t)
			ctx := context.Background()
			p := filepath.Join(m.Dir(), "rollout.jsonl")
			headSize := func() int64 {
				h, err := cat.Head(ctx, "s")
				require.NoError(t, err)
				size := int64(-1)
				require.NoError(t, manifest.Walk(ctx, store, h.Root, func(path string, e *manifest.Entry) error {
					if path == "rollout.jsonl" {
						size = e.Size
					}
					return nil
				}))
				return size
			}
			require.NoError(t, os.WriteFile(p, []byte("{}\n"), 0o644))
			require.Eventually(t, func() bool { return headSize() == 3 }, 5*time.Second, 10*time.Millisecond)
			f := appender(t, p)
			require.Equal(t, 1, backedOpens(t, e, "s", "rollout.jsonl"), "passed through")
			_, err := f.WriteString("{\"turn\":1}\n")
			require.NoError(t, err)
			if closed {
				require.NoError(t, f.Close())
			}
			require.Eventually(t, func() bool { return headSize() == 14 }, 5*time.Second, 10*time.Millisecond,
				"the head never took the passed-through append")
		})
	}
}
