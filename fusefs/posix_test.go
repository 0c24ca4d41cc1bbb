package fusefs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// skipPosix lists the shared tests whose expectation differs from POSIX on
// a local filesystem, with the reason.
var skipPosix = map[string]string{
	// It expects a second descriptor of the same process to conflict with
	// the first's fcntl lock, which holds for OFD locks forwarded to a
	// backing filesystem. homefs leaves byte-range locks to the kernel,
	// which keeps POSIX per-process semantics (as ext4 does); the
	// cross-process behaviour is tested in TestLocks.
	"FcntlFlockLocksFile": "POSIX fcntl locks are per process; see TestLocks",
	// It writes files of zeros and expects st_blocks to stay as it was.
	// homefs stores an all-zero chunk as a hole when it stores the file
	// (a flush, or the absorb right after a staged file's close), so the
	// count of such a file drops to its holes' count then, as on
	// filesystems that detect zeros. TestFstatUnlinked checks the rest.
	"FstatDeleted": "written zeros become holes once stored; see TestFstatUnlinked",
}

// TestFstatUnlinked: an open descriptor of an unlinked file reports what a
// stat reported before the unlink, but for ctime and a link count of 0.
func TestFstatUnlinked(t *testing.T) {
	e := NewTestEngine(t, nil)
	m := MountForTest(t, e, "posix", "", MountOptions{})
	for size := range 10 {
		p := filepath.Join(m.Dir(), fmt.Sprint(size))
		require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte{'x'}, size), 0o644))
		var before, after unix.Stat_t
		require.NoError(t, unix.Stat(p, &before))
		fd, err := unix.Open(p, unix.O_RDONLY, 0)
		require.NoError(t, err)
		t.Cleanup(func() { unix.Close(fd) })
		require.NoError(t, unix.Unlink(p))
		require.NoError(t, unix.Fstat(fd, &after))
		require.Equal(t, uint64(0), uint64(after.Nlink), "size %d", size)
		before.Nlink, before.Ctim, after.Ctim = 0, unix.Timespec{}, unix.Timespec{}
		require.Equal(t, before, after, "size %d", size)
	}
}

// TestPosix runs go-fuse's shared POSIX suite against a real kernel mount.
func TestPosix(t *testing.T) {
	for name, fn := range posixtest.All {
		t.Run(name, func(t *testing.T) {
			if reason, ok := skipPosix[name]; ok {
				t.Skip(reason)
			}
			e := NewTestEngine(t, nil)
			m := MountForTest(t, e, "posix", "", MountOptions{})
			if name == "FdLeak" {
				warmStagingPool(t, e, m)
			}
			fn(t, m.Dir())
		})
	}
}

// warmStagingPool fills the session's pool of spare staging files, which
// its first new file starts, so that FdLeak, which counts the process's
// descriptors around a file's create and reads, does not count the pool:
// a bounded cache of backingPool files, not a leak.
func warmStagingPool(t *testing.T, e *Engine, m *Mount) {
	t.Helper()
	if e.noStage {
		return
	}
	warm := filepath.Join(m.Dir(), ".warm")
	require.NoError(t, os.WriteFile(warm, []byte("x"), 0o644))
	require.NoError(t, os.Remove(warm))
	require.Eventually(t, func() bool { return poolLen(t, e, m.sess.name) == backingPool },
		10*time.Second, 5*time.Millisecond, "the staging pool fills")
}
