package daemon

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMountinfo(t *testing.T) {
	in := `22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw
43 27 0:40 / /tmp/a\040b rw,nosuid,nodev,relatime - fuse.homefs homefs:s1 rw,user_id=0
44 27 0:41 / /mnt/x rw - fuse.other other:x rw
`
	ms, err := parseMountinfo(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, ms, 3)
	require.Equal(t, "/tmp/a b", ms[1].Dir)
	require.True(t, isHomefsMount(ms[1]))
	require.False(t, isHomefsMount(ms[2]))
	require.False(t, isHomefsMount(ms[0]))
}

func TestWriteMountsAtomic(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, writeMounts(root, []MountInfo{{Dir: "/b", Session: "s"}, {Dir: "/a", Session: "t"}}))
	got, err := readMounts(root)
	require.NoError(t, err)
	require.Equal(t, "/a", got[0].Dir)
	require.Len(t, got, 2)
}
