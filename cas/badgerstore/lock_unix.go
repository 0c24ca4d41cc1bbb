//go:build unix

package badgerstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockFileName is our own lock beside Badger's: flock on it tells "another
// process" apart from every other open failure without reading Badger's
// error text. flock locks belong to the open file, so a second open in the
// same process conflicts too.
const lockFileName = "homefs-cas.lock"

func lockDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, lockFileName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cas: open %s: %w", dir, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("cas: open %s: %w", dir, ErrLocked)
		}
		return nil, fmt.Errorf("cas: lock %s: %w", dir, err)
	}
	return f, nil
}

func unlockDir(f *os.File) error {
	return f.Close() // closing drops the flock
}
