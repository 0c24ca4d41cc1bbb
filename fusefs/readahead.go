package fusefs

import (
	"fmt"
	"os"
	"strconv"
)

// readAheadBytes is the kernel's read-ahead window for a mount: how far
// past a sequential reader it asks for pages, in READ requests of up to
// MaxWrite. The kernel takes the smaller of MaxReadAhead and its default
// of 128 KiB at INIT, so the window is raised through the mount's
// backing device afterwards (setReadAhead). A window of several requests
// keeps one queued behind the one being served, and requests of MaxWrite
// give the chunk cache a request's chunks (16) to verify on every core at
// once; at 128 KiB a request carried two to four.
const readAheadBytes = 4 << 20

// bdiDir is where the kernel shows backing devices (sysfs-class-bdi).
const bdiDir = "/sys/class/bdi"

// setReadAhead sets the read-ahead window of the mount whose connection
// (its superblock's dev_t, connOf) is conn. Only root may; a mount that
// keeps the kernel's default reads sequential files more slowly, nothing
// else.
func setReadAhead(conn string) error {
	dev, err := strconv.ParseUint(conn, 10, 32)
	if err != nil {
		return fmt.Errorf("connection %q: %w", conn, err)
	}
	path := fmt.Sprintf("%s/%d:%d/read_ahead_kb", bdiDir, dev>>20, dev&(1<<20-1))
	if err := os.WriteFile(path, []byte(strconv.Itoa(readAheadBytes>>10)), 0); err != nil {
		return fmt.Errorf("set read-ahead: %w", err)
	}
	return nil
}
