package catalog

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/manifest"
)

func testLayout(at string) *manifest.Layout {
	return &manifest.Layout{
		Homes:     []manifest.Place{{Subtree: "home", At: at + "/.codex", Provider: "codex"}},
		Workspace: &manifest.Place{Subtree: "workspace", At: "/workspace"},
	}
}

// A layout given at create is recorded by every capture and carried by
// forks, creates from snapshots and restores.
func TestLayoutTravels(t *testing.T) {
	ctx := context.Background()
	c, st := newTestCatalog(t)
	l := testLayout("/home/agent")
	h, err := c.CreateSessionWith(ctx, "a", "", CreateOptions{Layout: l, Owner: &Owner{UID: 1000, GID: 100}})
	require.NoError(t, err)
	assert.Equal(t, l, h.Layout)
	root, err := manifest.GetTree(ctx, st, h.Root)
	require.NoError(t, err)
	require.NotNil(t, root.Self)
	assert.Equal(t, manifest.DirAttr{Mode: 0o755, UID: 1000, GID: 100, MtimeNs: h.CreatedNs, CtimeNs: h.CreatedNs, BtimeNs: h.CreatedNs}, *root.Self)

	id := capture(t, c, st, "a", "one")
	snap, _, err := c.Snapshot(ctx, id)
	require.NoError(t, err)
	assert.Equal(t, l, snap.Layout)

	f, err := c.Fork(ctx, id, "b")
	require.NoError(t, err)
	assert.Equal(t, l, f.Layout)

	// From a snapshot: the snapshot's layout, unless one is given; an
	// owner changes only the root's owner.
	g, err := c.CreateSessionWith(ctx, "c", id, CreateOptions{Owner: &Owner{UID: 7, GID: 8}})
	require.NoError(t, err)
	assert.Equal(t, l, g.Layout)
	groot, err := manifest.GetTree(ctx, st, g.Root)
	require.NoError(t, err)
	sroot, err := manifest.GetTree(ctx, st, snap.Root)
	require.NoError(t, err)
	assert.Equal(t, sroot.Entries, groot.Entries)
	assert.Equal(t, uint32(7), groot.Self.UID)
	other := testLayout("/home/other")
	g, err = c.CreateSessionWith(ctx, "d", id, CreateOptions{Layout: other})
	require.NoError(t, err)
	assert.Equal(t, other, g.Layout)

	// Restore keeps a session's own layout; a session without one takes
	// the snapshot's.
	r, err := c.Restore(ctx, "d", id)
	require.NoError(t, err)
	assert.Equal(t, other, r.Layout)
	_, err = c.CreateSession(ctx, "e", "")
	require.NoError(t, err)
	r, err = c.Restore(ctx, "e", id)
	require.NoError(t, err)
	assert.Equal(t, l, r.Layout)

	r, err = c.SetLayout(ctx, "e", nil)
	require.NoError(t, err)
	assert.Nil(t, r.Layout)
	_, err = c.SetLayout(ctx, "e", &manifest.Layout{Workspace: &manifest.Place{Subtree: "w", At: "rel"}})
	require.ErrorIs(t, err, manifest.ErrInvalid)
	_, err = c.CreateSessionWith(ctx, "f", "", CreateOptions{Layout: &manifest.Layout{Workspace: &manifest.Place{Subtree: "w", At: "/"}}})
	require.ErrorIs(t, err, manifest.ErrInvalid)
}
