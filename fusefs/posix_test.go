package fusefs

import (
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
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
			fn(t, m.Dir())
		})
	}
}
