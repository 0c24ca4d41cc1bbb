package main

import (
	"errors"

	"github.com/homefs/homefs/internal/api"
)

// Exit codes (documented in the root --help and docs/CLI.md).
const (
	exitOK         = 0
	exitOther      = 1
	exitUsage      = 2
	exitNotFound   = 3
	exitConflict   = 4
	exitCorrupt    = 5
	exitNotRunning = 6
	exitNoSpace    = 7
	exitDamaged    = 8
)

// usageError marks bad command-line arguments.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// errProblems: fsck found damage (already printed).
var errProblems = &api.Error{Code: api.CodeCorrupt, Message: "fsck found problems"}

func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		return exitUsage
	}
	// An error from the daemon carries its code; one found locally (before
	// or after talking to the daemon) carries the sentinels the daemon
	// classifies.
	code := api.Classify(err)
	var de *api.Error
	if errors.As(err, &de) {
		code = de.Code
	}
	switch code {
	case api.CodeUsage:
		return exitUsage
	case api.CodeNotFound:
		return exitNotFound
	case api.CodeConflict:
		return exitConflict
	case api.CodeCorrupt:
		return exitCorrupt
	case api.CodeNotRunning:
		return exitNotRunning
	case api.CodeNoSpace:
		return exitNoSpace
	case api.CodeDamaged:
		return exitDamaged
	}
	return exitOther
}
