package mountinfo

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	in := `22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw
43 27 0:40 / /tmp/a\040b rw,nosuid,nodev,relatime - fuse.homefs homefs:s1 rw,user_id=0
44 27 0:41 / /mnt/x rw - fuse.other other:x rw
45 27 0:42 / /mnt/y rw - fuse homefs:s2 rw
46 27 259:3 / /data rw - ext4 /dev/nvme0n1p3 rw
`
	ms, err := Parse(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, ms, 5)
	require.Equal(t, "/tmp/a b", ms[1].Dir)
	require.Equal(t, "40", ms[1].Conn())
	require.Equal(t, []bool{false, true, false, true, false},
		[]bool{ms[0].IsHomefs(), ms[1].IsHomefs(), ms[2].IsHomefs(), ms[3].IsHomefs(), ms[4].IsHomefs()})
	require.Equal(t, uint32(259), ms[4].Major)
	require.Equal(t, "271581187", ms[4].Conn()) // 259<<20 | 3
}
