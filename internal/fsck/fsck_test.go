package fsck

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/archive"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

func TestCheckFindsCorruptChunk(t *testing.T) {
	ctx := context.Background()
	// On disk: Measure's compression ratio needs a store that compresses.
	st, err := badgerstore.Open(t.TempDir(), badgerstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cat := catalog.New(st)
	dir := t.TempDir()
	writeFile(t, dir+"/a/b.txt", "hello world")
	writeFile(t, dir+"/c.txt", strings.Repeat("x", 100000))
	var buf bytes.Buffer
	require.NoError(t, archive.TarDir(ctx, dir, &buf, nil))
	res, err := archive.Import(ctx, st, &buf, archive.ImportOptions{})
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

// TestCheckChunkLengthPerUse: a chunk that is the right length in one file
// and the wrong one in another is reported against the second only,
// whichever Check reads first. The wrong use is a file grown past its
// stored short last chunk (150000 bytes, then 262144).
func TestCheckChunkLengthPerUse(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		good, bad string // session names: Check reads heads in name order
	}{
		{"grown file read first", "b", "a"},
		{"exact file read first", "a", "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := cas.NewMemory()
			cat := catalog.New(st)
			data := make([]byte, 150000)
			for i := range data {
				data[i] = byte(i*7 + 1)
			}
			var refs []cas.Ref
			for off := 0; off < len(data); off += manifest.ChunkSize {
				ref, err := st.Put(ctx, data[off:min(off+manifest.ChunkSize, len(data))])
				require.NoError(t, err)
				refs = append(refs, ref)
			}
			put := func(session string, size int64, chunks []cas.Ref) {
				root, err := manifest.PutTree(ctx, st, &manifest.Tree{Entries: []manifest.Entry{
					{Name: "f", Kind: manifest.KindFile, Mode: 0o644, Size: size, Chunks: chunks},
				}})
				require.NoError(t, err)
				_, err = cat.CreateSessionAt(ctx, session, root)
				require.NoError(t, err)
			}
			put(tc.good, 150000, refs)
			put(tc.bad, 262144, append(slices.Clone(refs), cas.Ref{}))

			rep, err := Check(ctx, st, cat, nil)
			require.NoError(t, err)
			require.Len(t, rep.Problems, 1, "%v", rep.Problems)
			p := rep.Problems[0]
			require.Equal(t, "session "+tc.bad, p.Owner)
			require.Equal(t, "f", p.Path)
			require.Equal(t, refs[2], p.Ref)
			require.Contains(t, p.Err, "chunk 2: 18928 bytes, want 65536")
		})
	}
}

// TestCheckSpecialFiles: fifos, sockets and device nodes (version 2 tree
// nodes) are clean entries, counted by Measure as no bytes.
func TestCheckSpecialFiles(t *testing.T) {
	ctx := context.Background()
	st := cas.NewMemory()
	cat := catalog.New(st)
	root, err := manifest.BuildTree(ctx, st, map[string]manifest.Entry{
		"d/pipe": {Kind: manifest.KindFifo, Mode: 0o600},
		"d/sock": {Kind: manifest.KindSocket, Mode: 0o755},
		"null":   {Kind: manifest.KindCharDev, Mode: 0o666, Rdev: 1<<8 | 3},
		"sda":    {Kind: manifest.KindBlockDev, Mode: 0o660, Rdev: 8 << 8},
	})
	require.NoError(t, err)
	_, err = cat.CreateSessionAt(ctx, "s", root)
	require.NoError(t, err)
	rep, err := Check(ctx, st, cat, nil)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
	require.EqualValues(t, 2, rep.Objects) // the two tree nodes
	s, err := Measure(ctx, st, cat)
	require.NoError(t, err)
	require.EqualValues(t, 0, s.Logical)
}
