package api

import (
	"context"
	"errors"
	"io/fs"
	"syscall"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/internal/archive"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/remote/remotetypes"
	"github.com/homefs/homefs/manifest"
)

// Code classifies an error for the client and the exit status of homefs
// and homefsd.
type Code string

const (
	CodeUsage       Code = "usage"       // bad arguments: names, paths, specs, archives
	CodeNotFound    Code = "not_found"   // no such session, snapshot, mount or directory
	CodeConflict    Code = "conflict"    // exists already, busy, in use, changed meanwhile
	CodeCorrupt     Code = "corrupt"     // damaged or missing stored data
	CodeUnavailable Code = "unavailable" // the daemon is shutting down or the store is closed
	CodeInternal    Code = "internal"    // anything else
	CodePermission  Code = "permission"  // the caller may not use this daemon
	CodeNotRunning  Code = "not_running" // (client side) no daemon answers on the socket
	CodeNoSpace     Code = "no_space"    // the store's disk is full: free space, then gc
	CodeDamaged     Code = "damaged"     // the store's files (or a session's journal) are damaged: left as they are
)

// Error is an error as it crosses the socket.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Is lets errors.Is(err, &Error{Code: c}) match by code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// Classify returns the code of err by the sentinels of the packages below
// the daemon (cas, manifest, catalog, fork, archive, remote) and the
// errnos they wrap: an *Error keeps its own. The daemon adds those of its
// own packages (fusefs); the CLI classifies with it what it meets itself.
func Classify(err error) Code {
	var de *Error
	switch {
	case errors.As(err, &de):
		return de.Code
	case errors.Is(err, catalog.ErrBadPrefix):
		// Before not found: it also wraps ErrNoSnapshot.
		return CodeUsage
	case errors.Is(err, catalog.ErrNoSession), errors.Is(err, catalog.ErrNoSnapshot),
		errors.Is(err, fork.ErrNotFound), errors.Is(err, remotetypes.ErrNoRemote),
		errors.Is(err, remotetypes.ErrNoBucket), errors.Is(err, remotetypes.ErrNoLease),
		errors.Is(err, remotetypes.ErrNoSnapshot), errors.Is(err, fs.ErrNotExist):
		return CodeNotFound
	case errors.Is(err, catalog.ErrExists), errors.Is(err, catalog.ErrSameSession),
		errors.Is(err, catalog.ErrConflict), errors.Is(err, cas.ErrConflict),
		errors.Is(err, syscall.EBUSY), errors.Is(err, fs.ErrExist),
		errors.Is(err, fork.ErrDiverged), errors.Is(err, fork.ErrConflict),
		errors.Is(err, remotetypes.ErrRemoteExists), errors.Is(err, catalog.ErrProtected),
		errors.Is(err, remotetypes.ErrLeased):
		return CodeConflict
	case errors.Is(err, cas.ErrCorrupt), errors.Is(err, cas.ErrNotFound),
		errors.Is(err, fork.ErrDamaged):
		// A ref the catalog names but the store lacks is damage too.
		return CodeCorrupt
	case errors.Is(err, catalog.ErrAmbiguous), errors.Is(err, manifest.ErrInvalid),
		errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, archive.ErrUnsafe), errors.Is(err, archive.ErrMalformed),
		errors.Is(err, archive.ErrUnsupported),
		errors.Is(err, fork.ErrUnknownProvider), errors.Is(err, fork.ErrInvalid),
		errors.Is(err, fork.ErrAmbiguous), errors.Is(err, fork.ErrNative),
		errors.Is(err, fork.ErrTooLarge), errors.Is(err, remotetypes.ErrNoCredentials),
		errors.Is(err, remotetypes.ErrNotS3), errors.Is(err, remotetypes.ErrWrongKey),
		errors.Is(err, remotetypes.ErrKeySource), errors.Is(err, remotetypes.ErrEncrypted),
		errors.Is(err, remotetypes.ErrNotEncrypted):
		return CodeUsage
	case errors.Is(err, cas.ErrNoSpace), errors.Is(err, syscall.ENOSPC):
		return CodeNoSpace
	case errors.Is(err, cas.ErrClosed), errors.Is(err, context.Canceled):
		return CodeUnavailable
	}
	return CodeInternal
}

// Exit statuses of homefs and homefsd (homefs --help, docs/CLI.md).
const (
	ExitOK         = 0
	ExitOther      = 1
	ExitUsage      = 2
	ExitNotFound   = 3
	ExitConflict   = 4
	ExitCorrupt    = 5
	ExitNotRunning = 6
	ExitNoSpace    = 7
	ExitDamaged    = 8
)

// ExitStatus is the exit status of a command that failed with an error of
// code c.
func ExitStatus(c Code) int {
	switch c {
	case CodeUsage:
		return ExitUsage
	case CodeNotFound:
		return ExitNotFound
	case CodeConflict:
		return ExitConflict
	case CodeCorrupt:
		return ExitCorrupt
	case CodeNotRunning:
		return ExitNotRunning
	case CodeNoSpace:
		return ExitNoSpace
	case CodeDamaged:
		return ExitDamaged
	}
	return ExitOther
}
