package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// TestImportBtime: an import gives every entry, and the root's own
// attributes, the birth time it is given (the import's time, as an
// extraction on ext4 would), and none without one.
func TestImportBtime(t *testing.T) {
	ctx := context.Background()
	data := makeTar(t,
		entry{name: "./", typ: tar.TypeDir},
		entry{name: "d/", typ: tar.TypeDir},
		entry{name: "d/f", typ: tar.TypeReg, body: "x"},
		entry{name: "l", typ: tar.TypeSymlink, link: "d/f"},
		entry{name: "h", typ: tar.TypeLink, link: "d/f"},
	)
	const at = 1_750_000_000_123_456_789
	for _, want := range []int64{at, 0} {
		st := cas.NewMemory()
		res, err := Import(ctx, st, bytes.NewReader(data), ImportOptions{BtimeNs: want})
		require.NoError(t, err)
		got := map[string]int64{}
		require.NoError(t, manifest.Walk(ctx, st, res.Root, func(p string, e *manifest.Entry) error {
			got[p] = e.BtimeNs
			return nil
		}))
		require.Equal(t, map[string]int64{"d": want, "d/f": want, "l": want, "h": want}, got)
		root, err := manifest.GetTree(ctx, st, res.Root)
		require.NoError(t, err)
		require.NotNil(t, root.Self)
		require.Equal(t, want, root.Self.BtimeNs)
	}
}
