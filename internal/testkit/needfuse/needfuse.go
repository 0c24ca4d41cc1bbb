// Package needfuse guards tests that mount with FUSE: where they cannot
// run (not root, no /dev/fuse) they are skipped, except in CI (the
// environment variable CI set, as CI services set it), where every test
// must run and a missing prerequisite fails the test instead of hiding
// it as a skip.
package needfuse

import (
	"os"
	"testing"
)

// Require skips t, or fails it under CI, unless the process is root and
// /dev/fuse exists.
func Require(t testing.TB) {
	t.Helper()
	if os.Getuid() != 0 {
		Skip(t, "the test mounts with FUSE: run it as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		Skip(t, "the test mounts with FUSE: no /dev/fuse")
	}
}

// Skip skips t for reason, or fails it when CI is set.
func Skip(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(reason + " (CI is set: the test must run)")
	}
	t.Skip(reason)
}
