package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestServeExecsDaemon: homefs serve becomes homefsd, the process it
// started as (a service manager's pid, signals and watchdog reach the
// daemon), and its --help is homefsd's.
func TestServeExecsDaemon(t *testing.T) {
	e := newEnv(t)
	e.start()
	st := e.status("--no-remote-check")
	require.Equal(t, e.proc.Process.Pid, st.PID, "the daemon answers from the pid homefs serve started as")
	exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(st.PID), "exe"))
	require.NoError(t, err)
	require.Equal(t, filepath.Join(filepath.Dir(homefsBin), daemonName), exe)

	help := e.ok("serve", "--help")
	require.Contains(t, help, "homefsd - the homefs daemon")
	require.Contains(t, help, "--fuse-uring")
	require.Contains(t, help, "--shutdown-grace")

	e.stop() // SIGTERM to that pid: a clean exit
}

// TestServeFindsDaemon: homefs serve runs the homefsd beside its own
// executable, symlinks resolved, else the one on $PATH; without either it
// fails, saying where it looked and how to build and install homefsd.
func TestServeFindsDaemon(t *testing.T) {
	alone := t.TempDir()
	lone := filepath.Join(alone, "homefs")
	b, err := os.ReadFile(homefsBin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(lone, b, 0o755))
	link := filepath.Join(t.TempDir(), "homefs")
	require.NoError(t, os.Symlink(homefsBin, link))
	noDaemon := t.TempDir() // a $PATH with no homefsd

	serve := func(bin, path string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, "serve", "--version")
		cmd.Env = append(os.Environ(), "PATH="+path, "HOMEFS_ROOT="+t.TempDir())
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return out.String(), exit.ExitCode()
		}
		require.NoError(t, err)
		return out.String(), 0
	}
	out, code := serve(link, noDaemon)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "homefsd version", "beside the link's target")

	out, code = serve(lone, noDaemon+":"+filepath.Dir(homefsBin))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "homefsd version", "on $PATH")

	out, code = serve(lone, noDaemon)
	require.Equal(t, exitOther, code, out)
	require.Contains(t, out, "homefsd, the daemon binary, is neither beside this homefs ("+filepath.Join(alone, "homefsd")+") nor on $PATH")
	require.Contains(t, out, "make build")
	require.Contains(t, out, "go install ./cmd/homefs ./cmd/homefsd")
}
