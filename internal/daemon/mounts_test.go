package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
)

func TestWriteMountsAtomic(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, writeMounts(root, []api.MountInfo{{Dir: "/b", Session: "s"}, {Dir: "/a", Session: "t"}}))
	got, err := readMounts(root)
	require.NoError(t, err)
	require.Equal(t, "/a", got[0].Dir)
	require.Len(t, got, 2)
}
