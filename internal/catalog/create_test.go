package catalog

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

func TestCreateSessionAtAndIndex(t *testing.T) {
	ctx := context.Background()
	st := cas.NewMemory()
	c := New(st)
	root, err := manifest.BuildTree(ctx, st, map[string]manifest.Entry{"d": {Kind: manifest.KindDir, Mode: 0o755}})
	require.NoError(t, err)
	h, err := c.CreateSessionAt(ctx, "imp", root)
	require.NoError(t, err)
	require.Equal(t, root, h.Root)
	_, err = c.CreateSessionAt(ctx, "imp", root)
	require.ErrorIs(t, err, ErrExists)
	_, id, err := c.Capture(ctx, "imp", root, "m", nil)
	require.NoError(t, err)
	idx, err := c.SnapshotIndex(ctx)
	require.NoError(t, err)
	require.Equal(t, []IndexEntry{{ID: id, Session: "imp"}}, idx)
}

func TestCreateSessionAtHandles(t *testing.T) {
	ctx := context.Background()
	st := cas.NewMemory()
	c := New(st)
	root, err := manifest.PutTree(ctx, st, &manifest.Tree{})
	require.NoError(t, err)
	handles := map[string]manifest.Handle{"codex": {ID: "0199", Through: "3"}}
	h, err := c.CreateSessionAtHandles(ctx, "native", root, handles)
	require.NoError(t, err)
	require.Equal(t, handles, h.Handles)
	got, err := c.Head(ctx, "native")
	require.NoError(t, err)
	require.Equal(t, handles, got.Handles)
	snap, _, err := c.Capture(ctx, "native", root, "", nil)
	require.NoError(t, err)
	require.Equal(t, handles, snap.Handles, "the first capture records the imported handles")
}
