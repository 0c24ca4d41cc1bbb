package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestFallocateRacesAppendsTwoMounts: fallocate(KEEP_SIZE) inside the
// file through a second mount of the session, served by the daemon, while
// a passed-through appender of the first mount writes. The kernel's inode
// lock serializes the two only within one mount; the daemon's repeat of
// its change in the shared backing file must not cut the appends made
// since it last looked (truncating the file to that size would lose up
// to a sixth of 240 KB of appends).
func TestFallocateRacesAppendsTwoMounts(t *testing.T) {
	t.Parallel()
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "s", "", MountOptions{})
	require.NoError(t, os.Mkdir(filepath.Join(m.Dir(), "d"), 0o755))
	m2 := MountForTest(t, e, "s", "d", MountOptions{})
	p := filepath.Join(m.Dir(), "d/log")
	w := appender(t, p)
	_, err := w.WriteString("head\n")
	require.NoError(t, err)
	f2, err := openT(t, filepath.Join(m2.Dir(), "log"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	require.Equal(t, 2, backedOpens(t, e, "s", "d/log"))
	var stop atomic.Bool
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !stop.Load() {
			if err := unix.Fallocate(int(f2.Fd()), unix.FALLOC_FL_KEEP_SIZE, 0, 4); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	var want bytes.Buffer
	want.WriteString("head\n")
	for i := range 20000 {
		line := fmt.Sprintf("line %06d\n", i)
		_, err := w.WriteString(line)
		require.NoError(t, err)
		want.WriteString(line)
	}
	stop.Store(true)
	wg.Wait()
	got := read(t, p)
	_, snap := captureMount(t, e, "s")
	require.Equal(t, want.Len(), len(got), "the live file holds every append")
	require.Equal(t, want.String(), got)
	require.Equal(t, want.String(), read(t, filepath.Join(snap, "d/log")), "the capture holds every append")
}
