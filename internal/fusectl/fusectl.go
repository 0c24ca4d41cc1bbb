// Package fusectl ends FUSE connections through the kernel's fusectl
// filesystem (/sys/fs/fuse/connections). A connection is a directory
// there named by the dev_t of its mount's superblock, which the mount
// table gives (mountinfo.ConnAt).
package fusectl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Dir is where the kernel's fusectl filesystem shows connections.
const Dir = "/sys/fs/fuse/connections"

// Abort ends the connection conn, mounting fusectl first where nothing
// has: every request waiting on it and every later one fails
// (ECONNABORTED, ENOTCONN), and its servers' reads end. Only root may.
func Abort(conn string) error {
	if conn == "" {
		return errors.New("connection unknown")
	}
	if _, err := os.Stat(filepath.Join(Dir, conn)); errors.Is(err, os.ErrNotExist) {
		if err := syscall.Mount("fusectl", Dir, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("mount fusectl at %s: %w", Dir, err)
		}
	}
	if err := os.WriteFile(filepath.Join(Dir, conn, "abort"), []byte("1"), 0); err != nil {
		return fmt.Errorf("abort connection %s: %w", conn, err)
	}
	return nil
}
