//go:build unix

package badgerstore

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

const spaceSupported = true

var errNoFallocate = errors.New("fallocate not supported")

// availBytes is the space an unprivileged writer may still take on dir's
// filesystem (root may take the reserved blocks too; not counting them
// errs on the safe side).
func availBytes(dir string) (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("statfs %s: %w", dir, err)
	}
	return int64(st.Bavail) * int64(st.Bsize), nil
}

// allocateFile creates path with n bytes of allocated blocks.
func allocateFile(path string, n int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fallocate(int(f.Fd()), 0, 0, n); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) {
			return errNoFallocate
		}
		return fmt.Errorf("fallocate %s: %w", path, err)
	}
	return nil
}
