package fusefs

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
)

// A mount reads ahead by readAheadBytes, not by the kernel's default of
// 128 KiB: sequential reads then come in requests of MaxWrite, whose
// chunks are verified in parallel.
func TestReadAheadWindow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root sets a mount's read-ahead window")
	}
	_, m := newMount(t)
	require.NotEmpty(t, m.conn)
	dev, err := strconv.ParseUint(m.conn, 10, 32)
	require.NoError(t, err)
	b, err := os.ReadFile(fmt.Sprintf("%s/%d:%d/read_ahead_kb", bdiDir, dev>>20, dev&(1<<20-1)))
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(readAheadBytes>>10), strings.TrimSpace(string(b)))
}

// countingGetter counts the gets that reach its store.
type countingGetter struct {
	cas.Getter
	mu   sync.Mutex
	gets map[cas.Ref]int // GUARDED_BY(mu)
}

func (g *countingGetter) Get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	g.mu.Lock()
	g.gets[ref]++
	g.mu.Unlock()
	return g.Getter.Get(ctx, ref)
}

// Every ref handed to prefetch is fetched once, however many more than
// there are fetchers, and the cache then serves it without a second get.
func TestPrefetchFetchesEveryRef(t *testing.T) {
	ctx := context.Background()
	store := cas.NewMemory()
	refs := make([]cas.Ref, 4*maxAhead)
	for i := range refs {
		ref, err := store.Put(ctx, randBytes(uint64(i), 4096))
		require.NoError(t, err)
		refs[i] = ref
	}
	g := &countingGetter{Getter: store, gets: make(map[cas.Ref]int)}
	c := newChunkCache(g, len(refs))
	c.prefetch(refs)
	c.prefetch(refs) // queued or in flight already: not fetched again
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.mu.Lock()
		cached := len(c.items)
		c.mu.Unlock()
		if cached == len(refs) {
			break
		}
		require.True(t, time.Now().Before(deadline), "%d of %d refs fetched", cached, len(refs))
		time.Sleep(time.Millisecond)
	}
	for _, ref := range refs {
		_, e, err := c.get(ctx, ref)
		require.NoError(t, err)
		c.release(e)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, ref := range refs {
		require.Equal(t, 1, g.gets[ref], "gets of %s", ref.Short())
	}
}
