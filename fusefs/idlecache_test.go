package fusefs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// opCounter counts the requests a mount serves, by kind.
type opCounter struct{ n [NumOps]atomic.Int64 }

func (c *opCounter) Request(op Op, _ syscall.Errno, _ time.Duration) { c.n[op].Add(1) }
func (c *opCounter) Flush(time.Duration, error)                      {}

// since returns the counts, by name, of the requests the kernel waits for
// (RELEASE, which it sends after the close returns, is left out) since
// before.
func (c *opCounter) since(before map[Op]int64) map[string]int64 {
	d := make(map[string]int64)
	for op := range NumOps {
		if op == OpRelease {
			continue
		}
		if k := c.n[op].Load() - before[op]; k != 0 {
			d[op.String()] = k
		}
	}
	return d
}

func (c *opCounter) now() map[Op]int64 {
	m := make(map[Op]int64)
	for op := range NumOps {
		m[op] = c.n[op].Load()
	}
	return m
}

// TestIdleTreeGrep: grep -r over a tree that nothing touched for longer
// than a minute costs what it costs a moment after the last one: an OPEN a
// file (and its RELEASE), no LOOKUP or GETATTR. A mount that alone shows
// its part of the session hears of every change, so the kernel's entries
// and attributes need not expire after a minute (longCacheTimeout): with
// a minute, every name of the tree was looked up again, a round trip a
// file and directory on top of the OPEN.
func TestIdleTreeGrep(t *testing.T) {
	if testing.Short() {
		t.Skip("waits past a minute")
	}
	t.Parallel()
	grep := needTool(t, "grep")
	obs := &opCounter{}
	e := newTestEngine(t, nil, Options{Observer: obs})
	d := MountForTest(t, e, "s", "", MountOptions{}).Dir()
	const dirs, files = 4, 10
	for i := range dirs {
		sub := filepath.Join(d, fmt.Sprint("d", i))
		require.NoError(t, os.Mkdir(sub, 0o755))
		for j := range files {
			require.NoError(t, os.WriteFile(filepath.Join(sub, fmt.Sprint(j)), []byte("package x\n\nfunc main() {}\n"), 0o644))
		}
	}
	pass := func() map[string]int64 {
		before := obs.now()
		runIn(t, d, grep, "-r", "-l", "func main", ".")
		return obs.since(before)
	}
	drops := cacheDrops(t)
	// The first pass reads (and sets the atimes), the second refetches
	// the attributes those reads made stale; after them a pass costs what
	// a grep costs while nothing changes. The periodic flush that takes
	// the new files into the store can make the kernel read one again
	// (and so refetch its attributes at the next pass) if it ends between
	// passes: warm is the first pass with no LOOKUP or GETATTR, of a few.
	for range 2 {
		pass()
	}
	warm := pass()
	for try := 0; try < 4 && warm[OpLookup.String()]+warm[OpGetAttr.String()] > 0; try++ {
		warm = pass()
	}
	time.Sleep(time.Minute + 5*time.Second)
	idle := pass()
	if cacheDrops(t) != drops {
		// The kernel forgot the names itself: they are looked up again
		// whatever the timeouts.
		t.Skip("the host dropped its caches during the test (drop_caches)")
	}
	for what, counts := range map[string]map[string]int64{"a moment after the last one": warm, "after a minute idle": idle} {
		require.Equal(t, int64(dirs*files), counts["open"], "OPENs of a grep %s: %v", what, counts)
		for _, op := range []Op{OpLookup, OpGetAttr} {
			require.Zero(t, counts[op.String()], "%v requests of a grep %s: %v", op, what, counts)
		}
	}
}

// cacheDrops returns how many times the host dropped its page cache and
// its dentries and inodes (echo N > /proc/sys/vm/drop_caches), which makes
// the kernel look names up again whatever a mount's timeouts.
func cacheDrops(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	require.NoError(t, err)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "drop_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, ", ")
}
