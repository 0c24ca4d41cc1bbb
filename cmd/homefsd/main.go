// Command homefsd is the homefs daemon: it owns a root's store, serves the
// root's socket and the sessions' mounts. homefs serve runs it (the same
// process: homefs execs it); every other homefs command talks to it over
// its socket (internal/api).
//
// It is a binary of its own so that the CLI links none of what only the
// daemon needs (go-fuse, Prometheus, the engine), and each of its calls
// starts in a few milliseconds.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/daemon"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := newApp().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "homefsd:", err)
	}
	code := exitCode(err)
	switch code {
	case api.ExitNoSpace:
		fmt.Fprintln(os.Stderr, "homefsd: the store's disk is full (it keeps a reserve so that it cannot crash);\n"+
			"  free space on it, then start again, and drop data (homefs forget, homefs session rm, homefs gc)")
	case api.ExitDamaged:
		fmt.Fprintln(os.Stderr, "homefsd: the store's files are damaged and were left as they are; copy the root aside first,\n"+
			"  then either restore it from a backup or a remote, or start with --salvage (homefs serve --salvage), which\n"+
			"  keeps a copy of each damaged log, cuts it at the damage, and lets homefs fsck report what was lost")
	}
	os.Exit(code)
}

// usageError marks bad command-line arguments (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// exitCode is homefsd's exit status for err: homefs's (docs/CLI.md).
func exitCode(err error) int {
	if err == nil {
		return api.ExitOK
	}
	if errors.As(err, new(usageError)) {
		return api.ExitUsage
	}
	return api.ExitStatus(daemon.Classify(err))
}
