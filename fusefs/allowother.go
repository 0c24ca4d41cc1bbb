package fusefs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"

	"golang.org/x/sys/unix"
)

// fuseConf is where fusermount3 reads user_allow_other.
const fuseConf = "/etc/fuse.conf"

// checkUnprivileged says what an ordinary user's daemon lacks to mount:
// fusermount3 (go-fuse's helper for mounts without privileges), and for
// allow_other a user_allow_other line in /etc/fuse.conf, which fusermount3
// requires; root needs neither. Without this check the mount fails with a
// bare "permission denied" or "no such file".
func checkUnprivileged(allowOther bool) error {
	if os.Geteuid() == 0 {
		return nil
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		if _, err := exec.LookPath("fusermount"); err != nil {
			return fmt.Errorf("%w: a daemon that is not root mounts through fusermount3, which is not installed (install the fuse3 package, or run the daemon as root)", ErrMountOptions)
		}
	}
	if err := unix.Access("/dev/fuse", unix.R_OK|unix.W_OK); err != nil {
		return fmt.Errorf("%w: a daemon that is not root needs read and write access to /dev/fuse (%v); most systems make it mode 0666", ErrMountOptions, err)
	}
	if !allowOther {
		return nil
	}
	conf, err := os.ReadFile(fuseConf)
	if err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("read %s: %w", fuseConf, err)
	}
	if !allowsOther(conf) {
		return fmt.Errorf("%w: mounts that other users (the agents) may enter need user_allow_other in %s when the daemon is not root; add that line, or mount with --private", ErrMountOptions, fuseConf)
	}
	return nil
}

// allowsOther reports whether a fuse.conf has a user_allow_other line.
func allowsOther(conf []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(conf))
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if string(line) == "user_allow_other" {
			return true
		}
	}
	return false
}
