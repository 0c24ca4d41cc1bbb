package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
)

// hookStore runs before (once) ahead of the first commit that forgets a
// snapshot, to stage a race at the worst moment.
type hookStore struct {
	cas.Store
	once   sync.Once
	before func()
}

func (h *hookStore) Commit(ctx context.Context, ops []cas.NameOp, durable bool) error {
	for _, op := range ops {
		if strings.HasPrefix(op.Name, snapshotPrefix) && op.Value == nil && h.before != nil {
			h.once.Do(h.before)
			break
		}
	}
	return h.Store.Commit(ctx, ops, durable)
}

func newHookCatalog(t *testing.T) (*Catalog, cas.Store, *hookStore) {
	t.Helper()
	hs := &hookStore{Store: newTestStore(t)}
	return New(hs, WithClock(new(stepClock).now)), hs.Store, hs
}

func indexed(t *testing.T, c *Catalog, id string) bool {
	t.Helper()
	ok, err := c.HasSnapshot(context.Background(), id)
	require.NoError(t, err)
	return ok
}

func captures(t *testing.T, c *Catalog, st cas.Store, session string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		ids = append(ids, capture(t, c, st, session, fmt.Sprint(i+1)))
	}
	return ids
}

func TestForgetRefusesProtected(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a := captures(t, c, st, "a", 4)

	err = c.Forget(ctx, []string{a[0], a[3]}, nil)
	require.ErrorIs(t, err, ErrProtected)
	assert.Contains(t, err.Error(), "head of session a")
	assert.True(t, indexed(t, c, a[0]), "a refused batch forgets nothing")

	err = c.Forget(ctx, []string{a[0], a[1]}, Protect{a[1]: "mounted at /mnt/x"})
	require.ErrorIs(t, err, ErrProtected)
	assert.Contains(t, err.Error(), "mounted at /mnt/x")
	assert.True(t, indexed(t, c, a[0]))

	require.NoError(t, c.Forget(ctx, []string{a[0], a[1]}, nil))
	assert.False(t, indexed(t, c, a[0]))
	assert.False(t, indexed(t, c, a[1]))
	assert.True(t, indexed(t, c, a[2]))
	require.NoError(t, c.Forget(ctx, []string{a[0]}, nil), "forgetting again is a no-op")
	assert.ErrorIs(t, c.Forget(ctx, []string{"abc"}, nil), ErrNoSnapshot)
}

// TestForgetRacingRestore: a restore that makes the head name a snapshot
// being forgotten lands between the forget's reads and its commit; the
// commit conflicts, the retry sees the new head and refuses.
func TestForgetRacingRestore(t *testing.T) {
	ctx := context.Background()
	c, st, hs := newHookCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a := captures(t, c, st, "a", 3)
	hs.before = func() {
		_, err := c.Restore(ctx, "a", a[1])
		require.NoError(t, err)
	}
	err = c.Forget(ctx, []string{a[0], a[1]}, nil)
	require.ErrorIs(t, err, ErrProtected)
	h, err := c.Head(ctx, "a")
	require.NoError(t, err)
	assert.Equal(t, a[1], h.Snapshot)
	assert.True(t, indexed(t, c, a[1]), "the head never names a forgotten snapshot")
	assert.True(t, indexed(t, c, a[0]), "the batch is atomic")
}

// TestForgetRacingCapture: a capture lands between the forget's reads and
// its commit. Its record stays valid; the forgotten parent of its parent
// dangles, and log shows the gap.
func TestForgetRacingCapture(t *testing.T) {
	ctx := context.Background()
	c, st, hs := newHookCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a := captures(t, c, st, "a", 4)
	var a5 string
	hs.before = func() { a5 = capture(t, c, st, "a", "5") }
	// Forget everything but the head, as keep-last 1 would have decided.
	require.NoError(t, c.Forget(ctx, a[:3], nil))
	snap, _, err := c.Snapshot(ctx, a5)
	require.NoError(t, err)
	assert.Equal(t, a[3], snap.Parent, "the capture's parent was the head, which is never forgotten")
	for _, id := range a[:3] {
		assert.False(t, indexed(t, c, id))
	}
	log, err := c.Log(ctx, "a")
	require.NoError(t, err)
	require.Len(t, log, 3)
	assert.Equal(t, a5, log[0].ID)
	assert.Equal(t, a[3], log[1].ID)
	assert.Equal(t, LogEntry{ID: a[2], Session: "a", Forgotten: true}, log[2])
	require.NoError(t, Reachable(ctx, st, func(cas.Ref) error { return nil }))
}

// TestForgetConcurrentCaptures: captures and policy forgets running at once
// leave a catalog whose every indexed record reads, whose head is indexed,
// and whose log and reachability walk succeed.
func TestForgetConcurrentCaptures(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < 60; i++ {
			_, _, err := c.Capture(ctx, "a", buildTree(t, st, fmt.Sprint("c", i), 1), "", nil)
			if err != nil && !errors.Is(err, ErrConflict) {
				t.Error(err)
				return
			}
		}
		close(stop)
	}()
	for done := false; !done; {
		select {
		case <-stop:
			done = true
		default:
		}
		_, err := c.ForgetPolicy(ctx, "a", Policy{Last: 2}, nil, time.UTC, false)
		if err != nil && !errors.Is(err, ErrProtected) {
			t.Fatal(err)
		}
	}
	wg.Wait()
	h, err := c.Head(ctx, "a")
	require.NoError(t, err)
	assert.True(t, indexed(t, c, h.Snapshot))
	idx, err := c.SnapshotIndex(ctx)
	require.NoError(t, err)
	for _, e := range idx {
		_, _, err := c.Snapshot(ctx, e.ID)
		require.NoError(t, err)
	}
	_, err = c.Log(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, Reachable(ctx, st, func(cas.Ref) error { return nil }))
}

// sweep deletes what Reachable does not reach, as gc does.
func sweep(t *testing.T, st cas.Store) int {
	t.Helper()
	ctx := context.Background()
	live := map[cas.Ref]bool{}
	require.NoError(t, Reachable(ctx, st, func(r cas.Ref) error { live[r] = true; return nil }))
	var dead []cas.Ref
	require.NoError(t, st.Enumerate(ctx, func(ci cas.ChunkInfo) error {
		if !live[ci.Ref] {
			dead = append(dead, ci.Ref)
		}
		return nil
	}))
	require.NoError(t, st.Delete(ctx, dead...))
	return len(dead)
}

func TestLogGaps(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a := captures(t, c, st, "a", 5)
	_, err = c.Fork(ctx, a[1], "b") // b: no capture yet, origin a2
	require.NoError(t, err)
	_, err = c.Fork(ctx, a[2], "c")
	require.NoError(t, err)
	c1 := capture(t, c, st, "c", "1")
	require.NoError(t, c.Forget(ctx, []string{a[1], a[2]}, nil))

	check := func(t *testing.T) {
		log, err := c.Log(ctx, "a")
		require.NoError(t, err)
		var got []string
		for _, e := range log {
			s := e.ID[:8]
			if e.Forgotten {
				s += " forgotten"
			}
			got = append(got, s)
		}
		assert.Equal(t, []string{a[4][:8], a[3][:8], a[2][:8] + " forgotten", a[0][:8]}, got,
			"the gap, then the older snapshots still kept")

		log, err = c.Log(ctx, "b")
		require.NoError(t, err)
		assert.Equal(t, []LogEntry{{ID: a[1], Session: "a", ForkPoint: true, Forgotten: true}}, log,
			"an origin's gap ends the log")

		log, err = c.Log(ctx, "c")
		require.NoError(t, err)
		require.Len(t, log, 2)
		assert.Equal(t, c1, log[0].ID)
		assert.Equal(t, LogEntry{ID: a[2], Session: "a", ForkPoint: true, Forgotten: true}, log[1])
	}
	t.Run("before gc", check)
	assert.Positive(t, sweep(t, st))
	t.Run("after gc", check)

	// The forks still work: their trees are their own heads'.
	for _, s := range []string{"b", "c"} {
		h, err := c.Head(ctx, s)
		require.NoError(t, err)
		require.NoError(t, VerifyComplete(ctx, st, h.Root))
	}
	// A restore across the gap is a fork in place (derived state dropped).
	h, err := c.Head(ctx, "a")
	require.NoError(t, err)
	own, err := c.InHistory(ctx, h, a[0])
	require.NoError(t, err)
	assert.False(t, own)
}

func TestPurge(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a := captures(t, c, st, "a", 3)
	_, err = c.Fork(ctx, a[0], "b")
	require.NoError(t, err)
	b1 := capture(t, c, st, "b", "1")
	_, err = c.CreateSession(ctx, "other", "")
	require.NoError(t, err)
	o1 := capture(t, c, st, "other", "1")

	_, err = c.Purge(ctx, "a", Protect{a[1]: "mounted at /mnt/a"})
	require.ErrorIs(t, err, ErrProtected)
	_, err = c.Head(ctx, "a")
	require.NoError(t, err, "a refused purge changes nothing")

	gone, err := c.Purge(ctx, "a", nil)
	require.NoError(t, err)
	assert.ElementsMatch(t, a, gone)
	_, err = c.Head(ctx, "a")
	assert.ErrorIs(t, err, ErrNoSession)
	for _, id := range a {
		assert.False(t, indexed(t, c, id))
	}
	aRoot, _, err := c.Snapshot(ctx, b1)
	require.NoError(t, err)
	assert.Positive(t, sweep(t, st))
	for _, id := range a {
		_, err := st.Get(ctx, cas.MustParseRef("sha256:"+id))
		assert.ErrorIs(t, err, cas.ErrNotFound, "record of %s collected", id[:8])
	}
	require.NoError(t, VerifyComplete(ctx, st, aRoot.Root))
	for _, id := range []string{b1, o1} {
		snap, _, err := c.Snapshot(ctx, id)
		require.NoError(t, err)
		require.NoError(t, VerifyComplete(ctx, st, snap.Root))
	}
	log, err := c.Log(ctx, "b")
	require.NoError(t, err)
	require.Len(t, log, 2)
	assert.Equal(t, b1, log[0].ID)
	assert.Equal(t, LogEntry{ID: a[0], Session: "a", ForkPoint: true, Forgotten: true}, log[1])
}

func TestPlan(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a := captures(t, c, st, "a", 4)
	_, err = c.Restore(ctx, "a", a[1]) // the head is now an older snapshot
	require.NoError(t, err)
	_, err = c.Plan(ctx, "a", Policy{}, nil, time.UTC)
	require.Error(t, err, "no policy would forget everything")
	ds, err := c.ForgetPolicy(ctx, "a", Policy{Last: 1}, Protect{a[0]: "mounted at /m"}, time.UTC, true)
	require.NoError(t, err)
	reasons := map[string][]string{}
	for _, d := range ds {
		reasons[d.ID] = d.Reasons
	}
	assert.Equal(t, map[string][]string{
		a[3]: {"last"}, a[2]: nil, a[1]: {"head of session a"}, a[0]: {"mounted at /m"},
	}, reasons)
	assert.True(t, indexed(t, c, a[2]), "dry run")
	_, err = c.ForgetPolicy(ctx, "a", Policy{Last: 1}, Protect{a[0]: "mounted at /m"}, time.UTC, false)
	require.NoError(t, err)
	assert.False(t, indexed(t, c, a[2]))
	assert.True(t, indexed(t, c, a[0]))
}
