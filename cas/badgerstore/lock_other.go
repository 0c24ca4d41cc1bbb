//go:build !unix

package badgerstore

import "os"

// lockDir relies on Badger's own directory lock where flock is missing.
func lockDir(dir string) (*os.File, error) { return nil, nil }

func unlockDir(f *os.File) error { return nil }
