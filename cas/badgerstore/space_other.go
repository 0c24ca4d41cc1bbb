//go:build !unix

package badgerstore

import "errors"

const spaceSupported = false

var errNoFallocate = errors.New("fallocate not supported")

func availBytes(string) (int64, error) { return 0, errors.New("statfs not supported") }

func allocateFile(string, int64) error { return errNoFallocate }
