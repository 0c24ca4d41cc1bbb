package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/stretchr/testify/require"
)

// TestNoOpendir: a mount alone in its session lists directories without
// OPENDIR, and its listings stay right through changes made in it, in an
// overlapping mount started after it, and by a restore.
func TestNoOpendir(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	d := filepath.Join(m.Dir(), "d")
	var want []string
	for i := range 100 {
		name := fmt.Sprintf("f%03d", i)
		write(t, filepath.Join(d, name), "")
		want = append(want, name)
	}
	require.Equal(t, want, readNames(t, d))
	require.True(t, m.gate.noOpendir.Load(), "OPENDIR was answered with ENOSYS")
	require.Equal(t, want, readNames(t, d), "from the kernel's cache")

	// Changes through the mount drop the cached listing.
	require.NoError(t, os.Remove(filepath.Join(d, "f050")))
	write(t, filepath.Join(d, "g"), "")
	want = append(slices.Delete(want, 50, 51), "g")
	require.Equal(t, want, readNames(t, d))

	// A restore tells the kernel.
	id, _ := captureMount(t, e, "s")
	write(t, filepath.Join(d, "h"), "")
	require.Equal(t, append(slices.Clone(want), "h"), readNames(t, d))
	require.NoError(t, e.Restore(t.Context(), "s", id))
	require.Equal(t, want, readNames(t, d))

	// An overlapping mount's changes show once the attributes the kernel
	// holds expire (the mount switched to short timeouts).
	other := MountForTest(t, e, "s", "d", MountOptions{})
	require.Equal(t, want, readNames(t, d), "cached again, under short timeouts")
	write(t, filepath.Join(other.Dir(), "i"), "")
	want = append(want, "i")
	require.Equal(t, want, readNames(t, other.Dir()))
	require.False(t, other.gate.noOpendir.Load(), "an overlapping mount keeps OPENDIR")
	require.Eventually(t, func() bool {
		return slices.Equal(want, readNames(t, d))
	}, 2*shortCacheTimeout+time.Second, 50*time.Millisecond)
}

func TestDirStreams(t *testing.T) {
	t.Parallel()
	var s dirStreams
	one := []fuse.DirEntry{{Name: "a"}}
	first := s.add(7, one)
	got, ok := s.get(first, 7)
	require.True(t, ok)
	require.Equal(t, one, got)
	_, ok = s.get(first, 8)
	require.False(t, ok, "a snapshot of another directory")
	_, ok = s.get(first+1, 7)
	require.False(t, ok, "never given out")

	// The least recently used snapshot goes first.
	second := s.add(7, one)
	for range streamsMax - 2 {
		s.add(9, one)
	}
	_, ok = s.get(first, 7) // now the most recently used
	require.True(t, ok)
	s.add(9, one)
	_, ok = s.get(second, 7)
	require.False(t, ok, "evicted")
	_, ok = s.get(first, 7)
	require.True(t, ok)

	// So does one that makes the total too large.
	big := make([]fuse.DirEntry, streamEntriesMax)
	s.add(10, big)
	_, ok = s.get(first, 7)
	require.False(t, ok)
	require.LessOrEqual(t, s.entries, streamEntriesMax)

	// Cookies are never negative and round-trip.
	id, k := splitCookie(cookie(1<<31-1, 1<<32-1))
	require.Equal(t, uint32(1<<31-1), id)
	require.Equal(t, 1<<32-1, k)
	require.Less(t, cookie(1<<31-1, 1<<32-1), uint64(1<<63))
}
