package main

import (
	"errors"

	"github.com/homefs/homefs/internal/api"
)

// Exit codes (documented in the root --help and docs/CLI.md; homefsd
// exits with the same ones).
const (
	exitOK         = api.ExitOK
	exitOther      = api.ExitOther
	exitUsage      = api.ExitUsage
	exitNotFound   = api.ExitNotFound
	exitConflict   = api.ExitConflict
	exitCorrupt    = api.ExitCorrupt
	exitNotRunning = api.ExitNotRunning
	exitNoSpace    = api.ExitNoSpace
	exitDamaged    = api.ExitDamaged
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
	return api.ExitStatus(api.Classify(err))
}
