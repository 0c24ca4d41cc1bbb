package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heldUnder counts this process's descriptors and mappings of files under
// dir: the staging files (named "…/backing/s/#123 (deleted)" once
// unnamed) and the journal of an engine whose store directory is dir.
func heldUnder(t *testing.T, dir string) (fds, maps int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	for _, ent := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", ent.Name()))
		if err == nil && strings.HasPrefix(target, dir+"/") {
			fds++
		}
	}
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, " "+dir+"/") {
			maps++
		}
	}
	return fds, maps
}

// waitHeld polls until heldUnder(dir) is (0, 0), failing after a generous
// deadline with the last count.
func waitHeld(t *testing.T, dir string) {
	t.Helper()
	var fds, maps int
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if fds, maps = heldUnder(t, dir); fds == 0 && maps == 0 {
			return
		}
	}
	t.Fatalf("an idle session still holds %d descriptors and %d mappings under %s", fds, maps, dir)
}

// TestIdleSessionHoldsNothing: once a mounted session was written,
// captured and left idle, the periodic flush closes its staging files and
// journal (an idle mount costs its connection only); the first new file
// after is staged all the same.
func TestIdleSessionHoldsNothing(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e := newTestEngine(t, nil, Options{FlushInterval: 50 * time.Millisecond, IdleAfter: 200 * time.Millisecond})
	m := MountForTest(t, e, "s", "", MountOptions{})
	for i := range 3 {
		write(t, filepath.Join(m.Dir(), fmt.Sprintf("f%d", i)), strings.Repeat("x", 100*(i+1)))
	}
	_, _, err := e.Capture(context.Background(), "s", "written", nil)
	require.NoError(t, err)
	waitHeld(t, e.storeDir)

	p := filepath.Join(m.Dir(), "new")
	w, err := openT(t, p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	require.NoError(t, err)
	staged, _ := stagedState(t, e, "s", "new")
	require.True(t, staged, "the first new file after idle is staged")
	_, err = w.WriteString("staged")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	require.Equal(t, "staged", read(t, p))
}

// TestIdleJournalReopens: the first fsync after the session's journal was
// parked goes to the journal again, reopened, in a file a replay reads as
// the durable head's.
func TestIdleJournalReopens(t *testing.T) {
	t.Parallel()
	e := newTestEngine(t, nil, Options{FlushInterval: -1})
	m := MountForTest(t, e, "s", "", MountOptions{})
	ctx := context.Background()
	p := filepath.Join(m.Dir(), "f")
	write(t, p, strings.Repeat("x", 100))
	require.NoError(t, e.Sync(ctx, "s"))
	s, err := e.live(ctx, "s")
	require.NoError(t, err)
	// A fill of the staging pool that still runs defers its park, and so
	// do records of the file's drop, which the absorber may make after the
	// flush (the kernel sends the close's RELEASE on its own time).
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		require.NoError(t, e.Sync(ctx, "s"))
		s.parkIdle(time.Now().Add(time.Hour), time.Minute)
		if fds, maps := heldUnder(t, e.storeDir); fds+maps == 0 {
			break
		}
	}
	fds, maps := heldUnder(t, e.storeDir)
	require.Zero(t, fds+maps, "parked: no descriptor, no mapping")

	rw, err := openT(t, p, os.O_RDWR, 0)
	require.NoError(t, err)
	_, err = rw.WriteAt([]byte("journaled"), 10)
	require.NoError(t, err)
	require.NoError(t, rw.Sync())
	require.Positive(t, s.state().JournalBytes, "the fsync went to the journal")
	require.NoError(t, rw.Close())

	f, err := os.Open(journalPath(e.storeDir, "s"))
	require.NoError(t, err)
	defer f.Close()
	gen, recs, err := readJournal(f)
	require.NoError(t, err)
	s.journal.mu.Lock()
	want := s.journal.gen
	s.journal.mu.Unlock()
	require.Equal(t, want, gen, "the header of the head the records apply to")
	var found bool
	ids := map[uint64]string{}
	for _, r := range recs {
		if r.kind == recBind {
			ids[r.id] = r.path
		}
		found = found || (r.kind == recWrite && ids[r.id] == "f" && bytes.Contains(r.data, []byte("journaled")))
	}
	require.True(t, found, "the fsync's record: %v", recs)
}

// TestJournalPark: a parked journal takes a reset and then a record as an
// open one does; its file then reads as the new generation's, and a
// parked journal's file holds no record of its generation.
func TestJournalPark(t *testing.T) {
	j, read := testJournal(t)
	require.NoError(t, j.reset(1))
	require.NoError(t, j.append([]journalRecord{{kind: recWrite, id: 2, off: 0, size: 1, data: []byte("a")}}))
	now := time.Now()
	j.park(now.Add(time.Hour), time.Second)
	require.NotNil(t, j.f, "a journal holding records stays open")

	require.NoError(t, j.reset(2))
	j.park(now, time.Hour)
	require.NotNil(t, j.f, "a journal used within idle stays open")
	j.park(now.Add(2*time.Hour), time.Hour)
	require.Nil(t, j.f, "an empty idle journal is parked")
	gen, recs := read()
	require.Equal(t, uint64(2), gen)
	require.Empty(t, recs)

	require.NoError(t, j.reset(3))
	require.NoError(t, j.write(journalRecord{kind: recWrite, id: 2, off: 1, size: 2, data: []byte("b")}))
	require.NotNil(t, j.f, "a record reopens the journal")
	require.NoError(t, j.sync())
	gen, recs = read()
	require.Equal(t, uint64(3), gen)
	require.Len(t, recs, 1)
	require.Equal(t, "b", string(recs[0].data))
}
