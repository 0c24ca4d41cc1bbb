package catalog

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// capture is Capture for tests: the root is built from msg.
func capture(t *testing.T, c *Catalog, st cas.Store, session, msg string) string {
	t.Helper()
	_, id, err := c.Capture(context.Background(), session, buildTree(t, st, session+msg, 2), msg, nil)
	require.NoError(t, err)
	return id
}

func TestFork(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	handles := map[string]manifest.Handle{"codex": {ID: "rollout-1", Through: "turn-4"}}
	snap, id, err := c.Capture(ctx, "a", buildTree(t, st, "a", 3), "base", handles)
	require.NoError(t, err)
	_, err = c.CreateSession(ctx, "taken", "")
	require.NoError(t, err)

	h, err := c.Fork(ctx, id[:MinPrefixLen], "b")
	require.NoError(t, err)
	assert.Equal(t, snap.Root, h.Root)
	assert.Equal(t, &manifest.Lineage{Session: "a", Snapshot: id}, h.Origin)
	assert.Equal(t, handles, h.Handles)
	assert.Empty(t, h.Snapshot)

	// The first capture after the fork records the origin; later ones not.
	s1, _, err := c.Capture(ctx, "b", buildTree(t, st, "b1", 1), "b1", nil)
	require.NoError(t, err)
	assert.Equal(t, h.Origin, s1.Origin)
	assert.Empty(t, s1.Parent)
	assert.Equal(t, handles, s1.Handles)
	s2, _, err := c.Capture(ctx, "b", buildTree(t, st, "b2", 1), "b2", nil)
	require.NoError(t, err)
	assert.Nil(t, s2.Origin)

	errTests := []struct {
		name, snap, target string
		want               error
	}{
		{"exists", id, "taken", ErrExists},
		{"same session", id, "a", ErrSameSession},
		{"no snapshot", "deadbeefdeadbeef", "c", ErrNoSnapshot},
		{"bad target", id, "-x", manifest.ErrInvalidName},
	}
	for _, tt := range errTests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Fork(ctx, tt.snap, tt.target)
			assert.ErrorIs(t, err, tt.want)
		})
	}
}

// TestForkIsO1: forking touches the same number of names and objects
// whatever the size of the tree.
func TestForkIsO1(t *testing.T) {
	ctx := context.Background()
	type counts struct{ puts, gets, commits, nameOps int64 }
	measure := func(files int) counts {
		st := &countingStore{Store: newTestStore(t)}
		c := New(st, WithClock(new(stepClock).now))
		_, err := c.CreateSession(ctx, "src", "")
		require.NoError(t, err)
		_, id, err := c.Capture(ctx, "src", buildTree(t, st, "x", files), "", nil)
		require.NoError(t, err)

		st.puts.Store(0)
		st.gets.Store(0)
		st.commits.Store(0)
		st.nameOps.Store(0)
		_, err = c.Fork(ctx, id, "dst")
		require.NoError(t, err)
		return counts{st.puts.Load(), st.gets.Load(), st.commits.Load(), st.nameOps.Load()}
	}
	small, large := measure(1), measure(5000)
	assert.Equal(t, small, large)
	assert.Equal(t, counts{puts: 0, gets: 1, commits: 1, nameOps: 1}, small)
}

func TestCaptureIsO1(t *testing.T) {
	ctx := context.Background()
	measure := func(files int) [3]int64 {
		st := &countingStore{Store: newTestStore(t)}
		c := New(st, WithClock(new(stepClock).now))
		_, err := c.CreateSession(ctx, "s", "")
		require.NoError(t, err)
		root := buildTree(t, st, "x", files)
		st.puts.Store(0)
		st.commits.Store(0)
		st.nameOps.Store(0)
		_, _, err = c.Capture(ctx, "s", root, "", nil)
		require.NoError(t, err)
		return [3]int64{st.puts.Load(), st.commits.Load(), st.nameOps.Load()}
	}
	assert.Equal(t, [3]int64{1, 1, 2}, measure(1))
	assert.Equal(t, measure(1), measure(5000))
}

func TestConcurrentForks(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "src", "")
	require.NoError(t, err)
	var ids []string
	for i := range 4 {
		ids = append(ids, capture(t, c, st, "src", fmt.Sprint(i)))
	}

	const n = 32
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		errs  = make([]error, n)
		heads = make([]*Head, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			heads[i], errs[i] = c.Fork(ctx, ids[i%len(ids)], "target")
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i, err := range errs {
		if err == nil {
			require.Equal(t, -1, winner, "two forks won")
			winner = i
			continue
		}
		assert.ErrorIs(t, err, ErrExists)
	}
	require.NotEqual(t, -1, winner, "no fork won")
	got, err := c.Head(ctx, "target")
	require.NoError(t, err)
	assert.Equal(t, heads[winner], got)
}

func TestLogAcrossForks(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a1 := capture(t, c, st, "a", "1")
	a2 := capture(t, c, st, "a", "2")
	a3 := capture(t, c, st, "a", "3") // after the fork point: not in b's log

	_, err = c.Fork(ctx, a2, "b")
	require.NoError(t, err)
	_, err = c.Fork(ctx, a2, "b0") // forked, never captured
	require.NoError(t, err)
	b1 := capture(t, c, st, "b", "1")
	b2 := capture(t, c, st, "b", "2")
	_, err = c.Fork(ctx, b1, "c")
	require.NoError(t, err)
	c1 := capture(t, c, st, "c", "1")

	type row struct {
		id, session string
		fork        bool
	}
	tests := []struct {
		session string
		want    []row
	}{
		{"a", []row{{a3, "a", false}, {a2, "a", false}, {a1, "a", false}}},
		{"b", []row{{b2, "b", false}, {b1, "b", false}, {a2, "a", true}, {a1, "a", false}}},
		{"b0", []row{{a2, "a", true}, {a1, "a", false}}},
		{"c", []row{{c1, "c", false}, {b1, "b", true}, {a2, "a", true}, {a1, "a", false}}},
	}
	for _, tt := range tests {
		t.Run(tt.session, func(t *testing.T) {
			log, err := c.Log(ctx, tt.session)
			require.NoError(t, err)
			var got []row
			for _, e := range log {
				got = append(got, row{e.ID, e.Session, e.ForkPoint})
				assert.Equal(t, e.Session, e.Snapshot.Session)
			}
			assert.Equal(t, tt.want, got)
		})
	}

	empty, err := c.CreateSession(ctx, "fresh", "")
	require.NoError(t, err)
	log, err := c.Log(ctx, empty.Session)
	require.NoError(t, err)
	assert.Empty(t, log)
	_, err = c.Log(ctx, "nope")
	assert.ErrorIs(t, err, ErrNoSession)
}

// TestLogMissingRecord: a lost record ends the log with an error and the
// entries before it. (A cycle cannot be built: ids are hashes of records
// that name their parents, and every record read is checked against its
// id; Log still guards against one.)
func TestLogMissingRecord(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	capture(t, c, st, "a", "1")
	a2 := capture(t, c, st, "a", "2")
	a3 := capture(t, c, st, "a", "3")
	require.NoError(t, st.Delete(ctx, cas.MustParseRef("sha256:"+a2)))

	log, err := c.Log(ctx, "a")
	require.ErrorIs(t, err, cas.ErrNotFound)
	require.Len(t, log, 1)
	assert.Equal(t, a3, log[0].ID)
}

func TestRestoreThenCapture(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "s", "")
	require.NoError(t, err)
	s1, id1, err := c.Capture(ctx, "s", buildTree(t, st, "1", 2), "1", map[string]manifest.Handle{"codex": {ID: "r", Through: "1"}})
	require.NoError(t, err)
	_, _, err = c.Capture(ctx, "s", buildTree(t, st, "2", 2), "2", map[string]manifest.Handle{"codex": {ID: "r", Through: "2"}})
	require.NoError(t, err)
	before, err := c.Head(ctx, "s")
	require.NoError(t, err)

	require.NoError(t, VerifyComplete(ctx, st, s1.Root))
	h, err := c.Restore(ctx, "s", id1[:12])
	require.NoError(t, err)
	assert.Equal(t, s1.Root, h.Root)
	assert.Equal(t, id1, h.Snapshot)
	assert.Equal(t, s1.Handles, h.Handles, "handles as of the snapshot")
	assert.Equal(t, before.Gen+1, h.Gen)

	s3, _, err := c.Capture(ctx, "s", buildTree(t, st, "3", 2), "3", nil)
	require.NoError(t, err)
	assert.Equal(t, id1, s3.Parent)
	assert.Nil(t, s3.Origin)

	_, err = c.Restore(ctx, "nope", id1)
	assert.ErrorIs(t, err, ErrNoSession)
	_, err = c.Restore(ctx, "s", "0000000000")
	assert.ErrorIs(t, err, ErrNoSnapshot)
}

// TestRestoreOtherSession: restoring another session's snapshot is a fork
// in place; Parent stays within one session.
func TestRestoreOtherSession(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	for _, s := range []string{"a", "b"} {
		_, err := c.CreateSession(ctx, s, "")
		require.NoError(t, err)
	}
	a1 := capture(t, c, st, "a", "1")
	capture(t, c, st, "b", "1")
	h, err := c.Restore(ctx, "b", a1)
	require.NoError(t, err)
	assert.Empty(t, h.Snapshot)
	assert.Equal(t, &manifest.Lineage{Session: "a", Snapshot: a1}, h.Origin)
	snap, _, err := c.Capture(ctx, "b", buildTree(t, st, "b2", 1), "", nil)
	require.NoError(t, err)
	assert.Empty(t, snap.Parent)
	assert.Equal(t, h.Origin, snap.Origin)
}

// TestLogOf: log of a snapshot walks from it; of a session without a head
// here whose snapshots are here (a pulled one), from its newest.
func TestLogOf(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "a", "")
	require.NoError(t, err)
	a1 := capture(t, c, st, "a", "1")
	a2 := capture(t, c, st, "a", "2")
	a3 := capture(t, c, st, "a", "3")
	_, err = c.Fork(ctx, a2, "b")
	require.NoError(t, err)
	b1 := capture(t, c, st, "b", "1")
	require.NoError(t, c.DeleteSession(ctx, "a")) // its snapshots stay, as after a pull

	ids := func(log []LogEntry) []string {
		var out []string
		for _, e := range log {
			out = append(out, e.ID)
		}
		return out
	}
	for _, tt := range []struct {
		spec string
		want []string
	}{
		{"a", []string{a3, a2, a1}},
		{a2[:12], []string{a2, a1}},
		{a2, []string{a2, a1}},
		{"a@" + a1[:8], []string{a1}},
		{"b", []string{b1, a2, a1}},
		{"b@" + b1[:12], []string{b1, a2, a1}},
	} {
		log, err := c.LogOf(ctx, tt.spec)
		require.NoError(t, err, tt.spec)
		assert.Equal(t, tt.want, ids(log), tt.spec)
	}
	_, err = c.Log(ctx, "a")
	assert.ErrorIs(t, err, ErrNoSession, "Log itself needs a head")
	for _, name := range []string{"nope", "bad"} { // "bad" is hex, but too short an id
		_, err = c.LogOf(ctx, name)
		assert.ErrorIs(t, err, ErrNoSession, name)
		assert.ErrorContains(t, err, "homefs pull "+name)
	}
	_, err = c.LogOf(ctx, "0123456789ab")
	assert.ErrorIs(t, err, ErrNoSnapshot)
	_, err = c.LogOf(ctx, "b@"+a1[:12])
	assert.ErrorIs(t, err, ErrNoSnapshot, "a snapshot of another session")
}
