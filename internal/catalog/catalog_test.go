package catalog

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// stepClock is a fixed clock that advances one second per reading, so
// records made in one test are distinct and reproducible.
type stepClock struct{ n atomic.Int64 }

func (c *stepClock) now() time.Time { return time.Unix(1_700_000_000+c.n.Add(1), 0) }

func newTestStore(t *testing.T) cas.Store {
	t.Helper()
	st := cas.NewMemory()
	t.Cleanup(func() { st.Close() })
	return st
}

func newTestCatalog(t *testing.T) (*Catalog, cas.Store) {
	t.Helper()
	st := newTestStore(t)
	return New(st, WithClock(new(stepClock).now)), st
}

// buildTree puts a root holding workspace/ with files one-chunk files whose
// content depends on seed, and returns the root.
func buildTree(t *testing.T, st cas.Store, seed string, files int) cas.Ref {
	t.Helper()
	ctx := context.Background()
	var ws manifest.Tree
	for i := range files {
		data := fmt.Appendf(nil, "%s file %d", seed, i)
		ref, err := st.Put(ctx, data)
		require.NoError(t, err)
		ws.Entries = append(ws.Entries, manifest.Entry{
			Name: fmt.Sprintf("f%06d", i), Kind: manifest.KindFile, Mode: 0o644,
			Size: int64(len(data)), Chunks: []cas.Ref{ref},
		})
	}
	wsRef, err := manifest.PutTree(ctx, st, &ws)
	require.NoError(t, err)
	root, err := manifest.PutTree(ctx, st, &manifest.Tree{Entries: []manifest.Entry{
		{Name: "workspace", Kind: manifest.KindDir, Mode: 0o755, Tree: wsRef},
	}})
	require.NoError(t, err)
	return root
}

func TestCreateSession(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "src", "")
	require.NoError(t, err)
	snap, id, err := c.Capture(ctx, "src", buildTree(t, st, "src", 2), "first", nil)
	require.NoError(t, err)

	tests := []struct {
		name, session, from string
		wantErr             error
		wantRoot            cas.Ref
		wantOrigin          *manifest.Lineage
	}{
		{name: "empty", session: "a", wantRoot: manifest.EmptyTreeRef()},
		{name: "from snapshot", session: "b", from: id, wantRoot: snap.Root,
			wantOrigin: &manifest.Lineage{Session: "src", Snapshot: id}},
		{name: "from prefix", session: "c", from: id[:10], wantRoot: snap.Root,
			wantOrigin: &manifest.Lineage{Session: "src", Snapshot: id}},
		{name: "exists", session: "a", wantErr: ErrExists},
		{name: "invalid name", session: "a/b", wantErr: manifest.ErrInvalidName},
		{name: "dot name", session: ".a", wantErr: manifest.ErrInvalidName},
		{name: "unknown snapshot", session: "d", from: "0123456789abcdef", wantErr: ErrNoSnapshot},
		{name: "snapshot prefix too short", session: "d", from: id[:4], wantErr: ErrNoSnapshot},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := c.CreateSession(ctx, tt.session, tt.from)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.session, h.Session)
			assert.Equal(t, tt.wantRoot, h.Root)
			assert.Equal(t, tt.wantOrigin, h.Origin)
			assert.Empty(t, h.Snapshot)
			assert.Nil(t, h.Handles, "creating does not carry handles; forking does")
			assert.Equal(t, uint64(1), h.Gen)
			got, err := c.Head(ctx, tt.session)
			require.NoError(t, err)
			assert.Equal(t, h, got)
		})
	}
	// The empty tree was put, so the empty session is complete.
	require.NoError(t, VerifyComplete(ctx, st, manifest.EmptyTreeRef()))
}

func TestSessionsAndDelete(t *testing.T) {
	ctx := context.Background()
	c, _ := newTestCatalog(t)
	for _, name := range []string{"zeta", "alpha", "Mid", "alpha.2"} {
		_, err := c.CreateSession(ctx, name, "")
		require.NoError(t, err)
	}
	names := func() []string {
		heads, err := c.Sessions(ctx)
		require.NoError(t, err)
		var out []string
		for _, h := range heads {
			out = append(out, h.Session)
		}
		return out
	}
	assert.Equal(t, []string{"Mid", "alpha", "alpha.2", "zeta"}, names())

	_, id, err := c.Capture(ctx, "alpha", manifest.EmptyTreeRef(), "", nil)
	require.NoError(t, err)
	require.NoError(t, c.DeleteSession(ctx, "alpha"))
	assert.Equal(t, []string{"Mid", "alpha.2", "zeta"}, names())

	_, err = c.Head(ctx, "alpha")
	assert.ErrorIs(t, err, ErrNoSession)
	assert.ErrorIs(t, c.DeleteSession(ctx, "alpha"), ErrNoSession)
	_, err = c.Head(ctx, "no/such")
	assert.ErrorIs(t, err, manifest.ErrInvalidName)

	// The snapshot outlives its session and can be forked.
	snap, _, err := c.Snapshot(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, "alpha", snap.Session)
	_, err = c.Fork(ctx, id, "alpha.3")
	require.NoError(t, err)
	_, err = c.Fork(ctx, id, "alpha")
	assert.ErrorIs(t, err, ErrSameSession, "even once deleted")
	_, err = c.CreateSession(ctx, "alpha", id)
	require.NoError(t, err, "the old name is free again")
}

func TestSetRoot(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	h, err := c.CreateSession(ctx, "s", "")
	require.NoError(t, err)
	r1 := buildTree(t, st, "one", 1)

	h2, err := c.SetRoot(ctx, "s", h.Gen, r1, true)
	require.NoError(t, err)
	assert.Equal(t, r1, h2.Root)
	assert.Equal(t, h.Gen+1, h2.Gen)
	assert.Greater(t, h2.UpdatedNs, h.UpdatedNs)
	assert.Equal(t, h.CreatedNs, h2.CreatedNs)

	_, err = c.SetRoot(ctx, "s", h.Gen, r1, false)
	assert.ErrorIs(t, err, ErrConflict, "stale gen")
	assert.ErrorIs(t, err, cas.ErrConflict)

	_, err = c.SetRoot(ctx, "nope", 1, r1, false)
	assert.ErrorIs(t, err, ErrNoSession)
	_, err = c.SetRoot(ctx, "s", h2.Gen, cas.Ref{}, false)
	assert.Error(t, err)

	got, err := c.Head(ctx, "s")
	require.NoError(t, err)
	assert.Equal(t, h2, got)
}

func TestCaptureChain(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	_, err := c.CreateSession(ctx, "s", "")
	require.NoError(t, err)

	steps := []struct {
		msg     string
		handles map[string]manifest.Handle
		want    map[string]manifest.Handle
	}{
		{"one", nil, nil},
		{"two", map[string]manifest.Handle{"codex": {ID: "x", Through: "1"}},
			map[string]manifest.Handle{"codex": {ID: "x", Through: "1"}}},
		{"three", map[string]manifest.Handle{"claude": {ID: "y"}},
			map[string]manifest.Handle{"codex": {ID: "x", Through: "1"}, "claude": {ID: "y"}}},
		{"four", map[string]manifest.Handle{"codex": {ID: "x", Through: "2"}},
			map[string]manifest.Handle{"codex": {ID: "x", Through: "2"}, "claude": {ID: "y"}}},
	}
	var ids []string
	for i, step := range steps {
		root := buildTree(t, st, step.msg, i+1)
		before, err := c.Head(ctx, "s")
		require.NoError(t, err)
		snap, id, err := c.Capture(ctx, "s", root, step.msg, step.handles)
		require.NoError(t, err)

		parent := ""
		if i > 0 {
			parent = ids[i-1]
		}
		assert.Equal(t, parent, snap.Parent, "step %d", i)
		assert.Equal(t, manifest.FormatVersion, snap.Version)
		assert.Equal(t, "s", snap.Session)
		assert.Equal(t, root, snap.Root)
		assert.Equal(t, step.msg, snap.Message)
		assert.Equal(t, step.want, snap.Handles)
		assert.Nil(t, snap.Origin)

		h, err := c.Head(ctx, "s")
		require.NoError(t, err)
		assert.Equal(t, id, h.Snapshot)
		assert.Equal(t, root, h.Root)
		assert.Equal(t, step.want, h.Handles)
		assert.Equal(t, before.Gen+1, h.Gen)

		got, full, err := c.Snapshot(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, id, full)
		assert.Equal(t, snap, got)
		ids = append(ids, id)
	}

	log, err := c.Log(ctx, "s")
	require.NoError(t, err)
	require.Len(t, log, len(ids))
	for i, e := range log {
		assert.Equal(t, ids[len(ids)-1-i], e.ID)
		assert.Equal(t, "s", e.Session)
		assert.False(t, e.ForkPoint)
	}

	_, _, err = c.Capture(ctx, "missing", manifest.EmptyTreeRef(), "", nil)
	assert.ErrorIs(t, err, ErrNoSession)
}

// TestCaptureAtomic: a capture whose head moved underneath writes neither
// the head nor the index entry.
func TestCaptureAtomic(t *testing.T) {
	ctx := context.Background()
	st := &racingStore{Store: newTestStore(t)}
	c := New(st, WithClock(new(stepClock).now))
	_, err := c.CreateSession(ctx, "s", "")
	require.NoError(t, err)
	st.before = func() {
		// Another writer flushes between Capture's read and its commit.
		h, err := c.Head(ctx, "s")
		require.NoError(t, err)
		_, err = c.SetRoot(ctx, "s", h.Gen, buildTree(t, st.Store, "other", 1), false)
		require.NoError(t, err)
	}
	_, id, err := c.Capture(ctx, "s", manifest.EmptyTreeRef(), "lost", nil)
	require.ErrorIs(t, err, ErrConflict)
	assert.Empty(t, id)
	n := 0
	require.NoError(t, st.ListNames(ctx, snapshotPrefix, func(string, []byte) error { n++; return nil }))
	assert.Zero(t, n, "no index entry without the head")
	h, err := c.Head(ctx, "s")
	require.NoError(t, err)
	assert.Empty(t, h.Snapshot)
}

// racingStore runs before once, just before the first durable commit
// of more than one op.
type racingStore struct {
	cas.Store
	once   sync.Once
	before func()
}

func (s *racingStore) Commit(ctx context.Context, ops []cas.NameOp, durable bool) error {
	if len(ops) > 1 && s.before != nil {
		s.once.Do(s.before)
	}
	return s.Store.Commit(ctx, ops, durable)
}

func TestSetHandles(t *testing.T) {
	c, _ := newTestCatalog(t)
	ctx := context.Background()
	_, err := c.CreateSession(ctx, "s", "")
	require.NoError(t, err)
	h, err := c.SetHandles(ctx, "s", map[string]manifest.Handle{"codex": {ID: "abc", Through: "3"}})
	require.NoError(t, err)
	require.Equal(t, uint64(2), h.Gen)
	h, err = c.SetHandles(ctx, "s", map[string]manifest.Handle{"pi": {ID: "p1"}})
	require.NoError(t, err)
	require.Equal(t, map[string]manifest.Handle{"codex": {ID: "abc", Through: "3"}, "pi": {ID: "p1"}}, h.Handles)
	_, err = c.SetHandles(ctx, "missing", nil)
	require.ErrorIs(t, err, ErrNoSession)
}

// TestCaptureHead: the head CaptureHead returns is the head it wrote, as
// Head reads it back, one generation past the head before.
func TestCaptureHead(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	before, err := c.CreateSession(ctx, "s", "")
	require.NoError(t, err)
	root := buildTree(t, st, "s", 2)
	snap, id, h, err := c.CaptureHead(ctx, "s", root, "m", nil)
	require.NoError(t, err)
	require.Equal(t, before.Gen+1, h.Gen)
	require.Equal(t, root, h.Root)
	require.Equal(t, id, h.Snapshot)
	require.Equal(t, root, snap.Root)
	read, err := c.Head(ctx, "s")
	require.NoError(t, err)
	require.Equal(t, read, h)
}
