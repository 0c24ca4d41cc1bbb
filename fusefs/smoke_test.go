package fusefs

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSmoke(t *testing.T) {
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "s1", "", MountOptions{})
	ctx := context.Background()
	p := filepath.Join(m.Dir(), "a.txt")
	require.NoError(t, os.WriteFile(p, []byte("hello"), 0o644))
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
	require.NoError(t, os.MkdirAll(filepath.Join(m.Dir(), "d/e"), 0o755))
	require.NoError(t, os.Rename(p, filepath.Join(m.Dir(), "d/e/b.txt")))
	_, id, err := e.Capture(ctx, "s1", "first", nil)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(m.Dir(), "d/e/b.txt"), []byte("changed"), 0o644))
	_, err = e.Fork(ctx, id, "s2")
	require.NoError(t, err)
	m2 := MountForTest(t, e, "s2", "", MountOptions{})
	b, err = os.ReadFile(filepath.Join(m2.Dir(), "d/e/b.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
	require.NoError(t, e.Restore(ctx, "s1", id))
	b, err = os.ReadFile(filepath.Join(m.Dir(), "d/e/b.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello", string(b))
}
