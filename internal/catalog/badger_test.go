package catalog

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
)

// scenario runs the catalog's main paths against st and returns the
// session logs it ended with, so a reopened store can be compared.
func scenario(t *testing.T, st cas.Store) map[string][]LogEntry {
	t.Helper()
	ctx := context.Background()
	c := New(st, WithClock(new(stepClock).now))
	_, err := c.CreateSession(ctx, "main", "")
	require.NoError(t, err)
	m1 := capture(t, c, st, "main", "1")
	m2 := capture(t, c, st, "main", "2")

	var wg sync.WaitGroup
	wins := make(chan string, 8)
	for i := range 8 {
		wg.Go(func() {
			if _, err := c.Fork(ctx, []string{m1, m2}[i%2], "side"); err == nil {
				wins <- "ok"
			} else {
				assert.ErrorIs(t, err, ErrExists)
			}
		})
	}
	wg.Wait()
	close(wins)
	require.Len(t, wins, 1)

	side, err := c.Head(ctx, "side")
	require.NoError(t, err)
	s1 := capture(t, c, st, "side", "1")
	h, err := c.Restore(ctx, "main", m1[:MinPrefixLen])
	require.NoError(t, err)
	require.NoError(t, VerifyComplete(ctx, st, h.Root))
	m3 := capture(t, c, st, "main", "3")
	snap, _, err := c.Snapshot(ctx, m3)
	require.NoError(t, err)
	assert.Equal(t, m1, snap.Parent)

	_, id, err := c.Resolve(ctx, "side")
	require.NoError(t, err)
	assert.Equal(t, s1, id)

	logs := map[string][]LogEntry{}
	for _, s := range []string{"main", "side"} {
		logs[s], err = c.Log(ctx, s)
		require.NoError(t, err)
	}
	assert.Len(t, logs["main"], 2)
	wantSide := map[string]int{m1: 2, m2: 3}[side.Origin.Snapshot] // the fork winner
	require.Len(t, logs["side"], wantSide)
	assert.Equal(t, side.Origin.Snapshot, logs["side"][1].ID)
	assert.True(t, logs["side"][1].ForkPoint)

	n := 0
	require.NoError(t, Reachable(ctx, st, func(cas.Ref) error { n++; return nil }))
	assert.Positive(t, n)
	return logs
}

func TestScenarioMemory(t *testing.T) {
	scenario(t, newTestStore(t))
}

func TestScenarioBadger(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := badgerstore.Options{Logger: slog.New(slog.DiscardHandler)}
	st, err := badgerstore.Open(dir, opts)
	require.NoError(t, err)
	logs := scenario(t, st)
	heads, err := New(st).Sessions(ctx)
	require.NoError(t, err)
	require.NoError(t, st.Close())

	// Everything the catalog committed is there after a reopen.
	st, err = badgerstore.Open(dir, opts)
	require.NoError(t, err)
	defer st.Close()
	c := New(st)
	again, err := c.Sessions(ctx)
	require.NoError(t, err)
	assert.Equal(t, heads, again)
	for s, want := range logs {
		got, err := c.Log(ctx, s)
		require.NoError(t, err)
		assert.Equal(t, want, got, s)
	}
}
