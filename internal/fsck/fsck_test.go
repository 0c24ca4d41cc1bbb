package fsck

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"homefs/cas"
	"homefs/internal/archive"
	"homefs/internal/catalog"
)

func TestCheckFindsCorruptChunk(t *testing.T) {
	ctx := context.Background()
	st := cas.NewMemory()
	cat := catalog.New(st)
	dir := t.TempDir()
	writeFile(t, dir+"/a/b.txt", "hello world")
	writeFile(t, dir+"/c.txt", strings.Repeat("x", 100000))
	var buf bytes.Buffer
	require.NoError(t, archive.TarDir(ctx, dir, &buf, nil))
	res, err := archive.Import(ctx, st, &buf, nil)
	require.NoError(t, err)
	_, err = cat.CreateSessionAt(ctx, "s", res.Root)
	require.NoError(t, err)
	_, _, err = cat.Capture(ctx, "s", res.Root, "one", nil)
	require.NoError(t, err)

	rep, err := Check(ctx, st, cat, nil)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.Equal(t, 1, rep.Sessions)
	require.Equal(t, 1, rep.Snapshots)

	require.NoError(t, st.CorruptForTest(cas.Sum([]byte("hello world"))))
	rep, err = Check(ctx, st, cat, nil)
	require.NoError(t, err)
	require.Len(t, rep.Problems, 2) // once for the session, once for the snapshot
	require.Equal(t, "session s", rep.Problems[0].Owner)
	require.Equal(t, "a/b.txt", rep.Problems[0].Path)
	require.Contains(t, rep.Problems[1].Owner, "snapshot")

	s, err := Measure(ctx, st, cat)
	require.NoError(t, err)
	require.EqualValues(t, 2*(11+100000), s.Logical)
	require.Greater(t, s.Dedup, 1.0)
	require.Greater(t, s.Compression, 1.0)
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	require.NoError(t, mkdirAll(p))
	require.NoError(t, writeAll(p, s))
}
