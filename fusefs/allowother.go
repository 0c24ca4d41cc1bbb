package fusefs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
)

// fuseConf is where fusermount3 reads user_allow_other.
const fuseConf = "/etc/fuse.conf"

// checkAllowOther says what an ordinary user's daemon lacks to mount with
// allow_other, which fusermount3 grants only when /etc/fuse.conf has
// user_allow_other; root needs nothing. Without this check the mount fails
// with a bare "permission denied".
func checkAllowOther() error {
	if os.Geteuid() == 0 {
		return nil
	}
	if _, err := exec.LookPath("fusermount3"); err != nil {
		return fmt.Errorf("%w: an ordinary user mounts through fusermount3, which is not installed (install the fuse3 package)", ErrMountOptions)
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
