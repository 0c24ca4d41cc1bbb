package fusefs

import (
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeFUSEOnExec marks every /dev/fuse descriptor of the process
// close-on-exec. go-fuse opens /dev/fuse for a direct mount, and receives
// the one fusermount3 opened, without O_CLOEXEC, so every process the
// daemon starts (fusermount3 for the next mount, say) would inherit the
// connections of all its mounts and keep them alive after the daemon died:
// a dead daemon's mounts would then hang instead of failing with ENOTCONN.
// Called after each mount; the ring transport opens its own descriptor
// with O_CLOEXEC.
func closeFUSEOnExec() error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err != nil || target != "/dev/fuse" {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil {
			return err
		}
	}
	return nil
}
