package fusefs

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestJoinNs(t *testing.T) {
	neg := func(s int64) uint64 { return uint64(s) }
	for _, tc := range []struct {
		sec  uint64
		nsec uint32
		want int64
	}{
		{0, 0, 0},
		{1, 5, 1e9 + 5},
		{neg(-1), 5, -1e9 + 5},
		{uint64(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC).Unix()), 0, math.MaxInt64},
		{neg(time.Date(1600, 1, 1, 0, 0, 0, 0, time.UTC).Unix()), 0, math.MinInt64},
		{math.MaxInt64 / 1_000_000_000, 854775807, math.MaxInt64},
		{math.MaxInt64 / 1_000_000_000, 854775808, math.MaxInt64},
		{math.MaxInt64 / 1_000_000_000, 854775806, math.MaxInt64 - 1},
	} {
		if got := joinNs(tc.sec, tc.nsec); got != tc.want {
			t.Errorf("joinNs(%d, %d) = %d, want %d", int64(tc.sec), tc.nsec, got, tc.want)
		}
		// What comes back splits into the time the kernel keeps.
		if tc.want > math.MinInt64 && tc.want < math.MaxInt64 {
			s, n := splitNs(tc.want)
			if s != tc.sec || n != tc.nsec {
				t.Errorf("splitNs(joinNs(%d, %d)) = %d, %d", int64(tc.sec), tc.nsec, int64(s), n)
			}
		}
	}
}

// On a mount, a time past 2262 (touch -d 2300-01-01) is the latest time
// there is, before and after a capture, never one wrapped into 1715.
func TestTimesClampOnMount(t *testing.T) {
	e, m := newMount(t)
	p := filepath.Join(m.Dir(), "future")
	write(t, p, "x")
	future := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	// As touch -d does (os.Chtimes goes through UnixNano, which wraps).
	ts := []unix.Timespec{{Sec: future.Unix()}, {Sec: future.Unix()}}
	require.NoError(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, 0))
	check := func(path string) {
		t.Helper()
		st := stat(t, path)
		require.Equal(t, 2262, time.Unix(st.Mtim.Unix()).UTC().Year(), "mtime year")
	}
	check(p)
	_, dir := captureMount(t, e, m.Session())
	check(filepath.Join(dir, "future"))
}
