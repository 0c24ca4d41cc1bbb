package fusefs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/manifest"
)

// chunkStore opens a Badger store holding n random whole chunks.
func chunkStore(t *testing.T, n int) (*badgerstore.Store, []cas.Ref) {
	t.Helper()
	return chunkStoreOf(t, n, func(i int) []byte { return randBytes(uint64(i)+7, manifest.ChunkSize) })
}

// chunkStoreOf opens a Badger store holding the n chunks chunk makes.
func chunkStoreOf(t *testing.T, n int, chunk func(i int) []byte) (*badgerstore.Store, []cas.Ref) {
	t.Helper()
	store, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	refs := make([]cas.Ref, n)
	for i := range refs {
		refs[i], err = store.Put(context.Background(), chunk(i))
		require.NoError(t, err)
	}
	return store, refs
}

// A file streamed through the cache is decoded into recycled buffers:
// the cache's own and a few free ones, however many chunks pass. Chunks
// stored raw and whole, and short ones stored compressed (a rollout's
// last chunk), which decode into less than their buffer.
func TestChunkCacheRecyclesBuffers(t *testing.T) {
	ctx := context.Background()
	short := func(i int) []byte {
		line := fmt.Sprintf("{\"chunk\":%d,\"text\":\"an agent's rollout\"}\n", i)
		return []byte(strings.Repeat(line, manifest.ChunkSize/2/len(line)))
	}
	for name, chunk := range map[string]func(int) []byte{
		"raw":        func(i int) []byte { return randBytes(uint64(i)+7, manifest.ChunkSize) },
		"compressed": short,
	} {
		store, refs := chunkStoreOf(t, 16, chunk)
		c := newChunkCache(store, 4)
		arrays := make(map[*byte]bool)
		for round := range 20 {
			for _, ref := range refs {
				data, e, err := c.get(ctx, ref)
				require.NoError(t, err)
				require.Equal(t, ref, cas.Sum(data), "%s, round %d", name, round)
				arrays[&data[:1][0]] = true
				c.release(e)
			}
		}
		require.LessOrEqual(t, len(arrays), c.max+maxFree, "%s: buffers used for %d gets", name, 20*len(refs))
	}
}

// A chunk a reader holds keeps its bytes while the cache evicts it and
// decodes other chunks, and its buffer is reused once released.
func TestChunkCachePinnedKeepsBytes(t *testing.T) {
	ctx := context.Background()
	store, refs := chunkStore(t, 8)
	c := newChunkCache(store, 1)
	held, he, err := c.get(ctx, refs[0])
	require.NoError(t, err)
	for range 10 {
		for _, ref := range refs[1:] {
			data, e, err := c.get(ctx, ref)
			require.NoError(t, err)
			require.False(t, &data[:1][0] == &held[:1][0], "a pinned chunk's buffer was reused")
			c.release(e)
		}
	}
	require.Equal(t, refs[0], cas.Sum(held), "a pinned chunk changed under its reader")
	c.release(he)
	c.mu.Lock()
	require.Contains(t, c.free, held[:0], "a released evicted chunk's buffer is kept for reuse")
	c.mu.Unlock()
}

// Readers, read-ahead and eviction at once: every reader sees its
// chunk's bytes until it releases them (run with -race).
func TestChunkCacheConcurrentReaders(t *testing.T) {
	ctx := context.Background()
	store, refs := chunkStore(t, 32)
	c := newChunkCache(store, 3)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 300 {
				i := r.IntN(len(refs))
				c.prefetch(refs[i:min(i+4, len(refs))])
				data, e, err := c.get(ctx, refs[i])
				if err != nil {
					t.Error(err)
					return
				}
				if cas.Sum(data) != refs[i] {
					t.Errorf("chunk %d: wrong bytes served", i)
				}
				c.release(e)
			}
		}()
	}
	wg.Wait()
}

// The cache's buffers are advised to be huge pages: the mapping that holds
// the slab's aligned middle has the hugepage flag (smaps' "hg").
func TestChunkCacheSlabHugePages(t *testing.T) {
	if _, err := os.Stat("/sys/kernel/mm/transparent_hugepage/enabled"); err != nil {
		t.Skip("no transparent huge pages on this kernel")
	}
	slab := newSlab(8 << 20)
	mid := uintptr(unsafe.Pointer(&slab[4<<20]))
	smaps, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	var inside bool
	for _, line := range strings.Split(string(smaps), "\n") {
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x ", &lo, &hi); n == 2 && strings.Contains(line[:strings.IndexByte(line, ' ')], "-") {
			inside = lo <= mid && mid < hi
			continue
		}
		if inside && strings.HasPrefix(line, "VmFlags:") {
			require.Contains(t, strings.Fields(line), "hg", "the slab's mapping: %s", line)
			runtime.KeepAlive(slab)
			return
		}
	}
	t.Fatal("the slab's mapping is not in /proc/self/smaps")
}

// sharingGetter gives the same slice for shared to every caller (as a
// remote fetch hands its bytes to each reader that waited for it) and
// decodes the other chunks into the buffers it is given.
type sharingGetter struct {
	*badgerstore.Store
	shared cas.Ref
	bytes  []byte
}

func (g *sharingGetter) GetManyInto(ctx context.Context, refs []cas.Ref, bufs [][]byte) ([][]byte, []error) {
	data, errs := g.Store.GetManyInto(ctx, refs, bufs)
	for i, ref := range refs {
		if ref == g.shared {
			data[i], errs[i] = g.bytes, nil
		}
	}
	return data, errs
}

// Bytes the cache did not decode into a buffer of its own are never
// reused for another chunk: a getter may have given them to others too.
func TestChunkCacheKeepsOthersBytes(t *testing.T) {
	ctx := context.Background()
	store, refs := chunkStore(t, 8)
	shared, err := store.Get(ctx, refs[0])
	require.NoError(t, err)
	g := &sharingGetter{Store: store, shared: refs[0], bytes: shared}
	c := newChunkCache(g, 1)
	for range 5 {
		for _, ref := range refs {
			_, e, err := c.get(ctx, ref)
			require.NoError(t, err)
			c.release(e)
		}
	}
	require.Equal(t, refs[0], cas.Sum(shared), "the getter's own bytes were decoded over")
}
