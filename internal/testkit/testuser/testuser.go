// Package testuser runs test programs as an unprivileged user, as agents
// run on the hosts homefs serves: a credential for uid and gid 65534
// (nobody) and directories that user owns and can reach.
package testuser

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Nobody is uid and gid 65534, as the e2e tests use.
var Nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

// Require skips a test that switches users when the test does not run as
// root.
func Require(t testing.TB) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("running as another user needs root")
	}
}

// Dir returns a new temporary directory owned by cred (the test's own when
// cred is nil) that cred can reach: t.TempDir's parents are mode 0700, so
// they are opened up to 0755.
func Dir(t testing.TB, cred *syscall.Credential) string {
	t.Helper()
	dir := t.TempDir()
	if cred == nil {
		return dir
	}
	Reach(t, dir)
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Reach makes path and its parents below the temporary directory
// searchable by everyone.
func Reach(t testing.TB, path string) {
	t.Helper()
	tmp := filepath.Clean(os.TempDir())
	for p := filepath.Clean(path); p != tmp && p != "/" && p != "."; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, fi.Mode().Perm()|0o055); err != nil {
			t.Fatal(err)
		}
	}
}

// Chown gives path and everything below it to cred; nil does nothing.
func Chown(t testing.TB, path string, cred *syscall.Credential) {
	t.Helper()
	if cred == nil {
		return
	}
	err := filepath.Walk(path, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// SysProcAttr runs a command as cred; nil for the test's own user.
func SysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	if cred == nil {
		return nil
	}
	return &syscall.SysProcAttr{Credential: cred}
}

// Run runs argv as cred (nil: the test's own user) in cwd with an empty
// stdin and env, at most 3 minutes, and returns its output.
func Run(cred *syscall.Credential, cwd string, env, argv []string) (stdout, stderr []byte, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = cwd
	cmd.Env = env
	cmd.SysProcAttr = SysProcAttr(cred)
	var out, errb bytes.Buffer
	cmd.Stdin = strings.NewReader("")
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.Bytes(), errb.Bytes(), err
}

// Environ is the test's environment without the variables whose names
// start with one of prefixes (and without HOME), for a program that must
// not see the test's own settings.
func Environ(prefixes ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HOME=") || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(kv, p) }) {
			continue
		}
		env = append(env, kv)
	}
	return env
}
