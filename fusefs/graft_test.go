package fusefs

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/manifest"
)

// entryAt finds path in root.
func entryAt(t *testing.T, e *Engine, session, path string) *manifest.Entry {
	t.Helper()
	ctx := context.Background()
	root, err := e.Root(ctx, session)
	require.NoError(t, err)
	var found *manifest.Entry
	require.NoError(t, manifest.Walk(ctx, e.store, root, func(p string, ent *manifest.Entry) error {
		if p == path {
			c := *ent
			found = &c
		}
		return nil
	}))
	return found
}

func TestGraftSharesChunksAndShowsInMount(t *testing.T) {
	ctx := context.Background()
	e := NewTestEngine(t, nil)
	src := MountForTest(t, e, "src", "", MountOptions{})
	dst := MountForTest(t, e, "dst", "", MountOptions{})
	data := make([]byte, 300<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	require.NoError(t, os.MkdirAll(filepath.Join(src.Dir(), "sessions/2026"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(src.Dir(), "sessions/2026/r.jsonl"), data, 0o600))

	ent := entryAt(t, e, "src", "sessions/2026/r.jsonl")
	require.NotNil(t, ent)
	// Look it up once so that the kernel caches a negative or positive entry.
	_, err := os.Stat(filepath.Join(dst.Dir(), "home/sessions/2026/r.jsonl"))
	require.True(t, errors.Is(err, os.ErrNotExist))

	var seen *manifest.Entry
	require.NoError(t, e.Graft(ctx, "dst", "home/sessions/2026/r.jsonl", ent, func(cur *manifest.Entry) error {
		seen = cur
		return nil
	}))
	require.Nil(t, seen)
	got, err := os.ReadFile(filepath.Join(dst.Dir(), "home/sessions/2026/r.jsonl"))
	require.NoError(t, err)
	require.Equal(t, data, got)
	grafted := entryAt(t, e, "dst", "home/sessions/2026/r.jsonl")
	require.Equal(t, ent.Chunks, grafted.Chunks)
	require.Equal(t, ent.Index, grafted.Index)

	veto := errors.New("diverges")
	err = e.Graft(ctx, "dst", "home/sessions/2026/r.jsonl", ent, func(cur *manifest.Entry) error {
		require.NotNil(t, cur)
		return veto
	})
	require.ErrorIs(t, err, veto)

	require.NoError(t, e.Remove(ctx, "dst", "home/sessions"))
	_, err = os.Stat(filepath.Join(dst.Dir(), "home/sessions"))
	require.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
	require.NoError(t, e.Remove(ctx, "dst", "home/nothing/here"))
}
