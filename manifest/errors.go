package manifest

import (
	"errors"
	"fmt"
)

// Sentinel errors, to be tested with errors.Is. Returned errors wrap them
// with the context (which entry, which field, why).
var (
	// ErrInvalid: data that breaks a rule of the data model. ErrInvalidName,
	// ErrInvalidPath and ErrMalformed are kinds of ErrInvalid.
	ErrInvalid = errors.New("manifest: invalid")
	// ErrInvalidName: an entry, xattr or session name that is not allowed.
	ErrInvalidName = fmt.Errorf("%w name", ErrInvalid)
	// ErrInvalidPath: a slash-separated path that is not allowed.
	ErrInvalidPath = fmt.Errorf("%w path", ErrInvalid)
	// ErrMalformed: bytes that do not parse as the encoding they claim.
	ErrMalformed = fmt.Errorf("%w encoding", ErrInvalid)
	// ErrUnsupportedVersion: an encoding of another FormatVersion (or an
	// unknown object type).
	ErrUnsupportedVersion = errors.New("manifest: unsupported version")
	// ErrTooLarge: an input or a result over one of the size limits.
	ErrTooLarge = errors.New("manifest: too large")
	// SkipSubtree, returned by a Walk, WalkRefs or Diff callback, skips the
	// children of the current directory or index node. It is not an error.
	//
	//lint:ignore ST1012 a control value named as fs.SkipDir is, not a failure
	SkipSubtree = errors.New("manifest: skip subtree")
)

// errf wraps sentinel with a formatted context message.
func errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// wrapf prefixes err with a formatted context.
func wrapf(err error, format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, err)...)
}
