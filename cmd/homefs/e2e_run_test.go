package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/daemon"
	"github.com/homefs/homefs/manifest"
)

// nobody is the unprivileged agent user of these tests.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

// openUp lets every user traverse dir and its parents up to the temporary
// directory (t.TempDir makes them 0700).
func openUp(t *testing.T, dir string) {
	t.Helper()
	for p := dir; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
}

// as runs a shell command as cred and returns its combined output and
// error.
func as(cred *syscall.Credential, dir, script string) (string, error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// hostMounts returns the mountpoints of the test process's namespace (the
// host's) that lie under one of prefixes.
func hostMounts(t *testing.T, prefixes ...string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		for _, p := range prefixes {
			if strings.HasPrefix(f[4], p) {
				out = append(out, f[4])
			}
		}
	}
	return out
}

// TestMountForAgentUsers: mounts are allow_other with the kernel checking
// modes (an agent user may enter and write what it owns, not what it does
// not), --owner hands a root to the agent user, --private keeps others out.
func TestMountForAgentUsers(t *testing.T) {
	e := newEnv(t)
	e.start()
	openUp(t, e.dir)
	e.ok("session", "create", "s", "--owner", "65534:65534")
	mnt := e.mkdir("mnt")
	e.ok("mount", "s", mnt)
	out, err := as(nobody, mnt, "mkdir .codex && echo hi > .codex/f && cat .codex/f && id -u")
	require.NoError(t, err, out)
	require.Equal(t, "hi\n65534\n", out)
	st, err := os.Stat(filepath.Join(mnt, ".codex/f"))
	require.NoError(t, err)
	require.Equal(t, uint32(65534), st.Sys().(*syscall.Stat_t).Uid)

	// A directory root owns with mode 0755: the kernel refuses nobody.
	require.NoError(t, os.Mkdir(filepath.Join(mnt, "root-only"), 0o755))
	out, err = as(nobody, mnt, "touch root-only/x")
	require.Error(t, err)
	require.Contains(t, out, "Permission denied")

	// --owner on a mount of a subtree; --private keeps everyone else out.
	e.ok("unmount", mnt)
	sub := e.mkdir("sub")
	e.ok("mount", "s/root-only", sub, "--owner", "65534:65534")
	out, err = as(nobody, sub, "touch x && ls")
	require.NoError(t, err, out)
	require.Equal(t, "x\n", out)
	priv := e.mkdir("priv")
	e.ok("mount", "s", priv, "--private")
	out, err = as(nobody, priv, "ls")
	require.Error(t, err, out)
	e.ok("mount", "s", e.mkdir("ro"), "--read-only")
	e.fails(exitUsage, "read-only mount cannot change its root's owner", "mount", "s", e.mkdir("ro2"), "--read-only", "--owner", "1:1")
}

// runEnv is an env whose daemon serves a session "s" with canonical paths
// under e.dir/canon, owned by nobody.
func newRunEnv(t *testing.T, homeSubtree string) (*env, string) {
	t.Helper()
	e := newEnv(t)
	e.start()
	canon := filepath.Join(e.dir, "canon")
	require.NoError(t, os.MkdirAll(canon, 0o755))
	openUp(t, canon)
	e.ok("session", "create", "s", "--owner", "nobody",
		"--home", "codex="+homeSubtree, "--home-at", "codex="+canon+"/home/.codex",
		"--workspace-at", canon+"/ws")
	return e, canon
}

// TestRun: homefs run shows the session's parts at their canonical paths
// to an unprivileged user, sets CODEX_HOME and the cwd, returns the
// command's status, leaves nothing in the host's mount table, and the
// layout travels with forks and snapshots.
func TestRun(t *testing.T) {
	e, canon := newRunEnv(t, "home")
	r := e.run("run", "s", "--user", "nobody", "--", "sh", "-c",
		`id -u; pwd; echo "$CODEX_HOME"; echo turn > note.txt; mkdir -p "$CODEX_HOME/sessions"; echo cfg > "$CODEX_HOME/config.toml"; exit 3`)
	require.Equal(t, 3, r.code, r.stderr)
	require.Equal(t, "65534\n"+canon+"/ws\n"+canon+"/home/.codex\n", r.stdout)
	require.Empty(t, hostMounts(t, canon, daemon.RunDirFor(e.root)), "nothing of the run stays mounted")

	// The files are the session's, owned by the agent user.
	dump := e.mkdir("dump")
	snap := strings.TrimSpace(e.ok("capture", "s"))
	e.ok("export", snap, dump)
	require.Equal(t, "turn\n", readFile(t, filepath.Join(dump, "workspace/note.txt")))
	require.Equal(t, "cfg\n", readFile(t, filepath.Join(dump, "home/config.toml")))

	// The layout is the snapshot's and the fork's.
	var snaps []api.SnapshotInfo
	require.NoError(t, json.Unmarshal([]byte(e.ok("log", "s", "--json")), &snaps))
	var info api.SessionInfo
	require.NoError(t, json.Unmarshal([]byte(e.ok("fork", "s", "t", "--json")), &info))
	want := &manifest.Layout{
		Homes:     []manifest.Place{{Subtree: "home", At: canon + "/home/.codex", Provider: "codex"}},
		Workspace: &manifest.Place{Subtree: "workspace", At: canon + "/ws"},
	}
	require.Equal(t, want, info.Layout)
	r = e.run("run", "t", "--", "cat", "note.txt")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "turn\n", r.stdout)

	// A run shares a whole-session mount that exists, and that mount
	// cannot be unmounted under it.
	mnt := e.mkdir("mnt")
	e.ok("mount", "s", mnt)
	r = e.run("run", "s", "--", "sh", "-c", "echo shared > shared.txt")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "shared\n", readFile(t, filepath.Join(mnt, "workspace/shared.txt")))
	require.Equal(t, []string{mnt}, hostMounts(t, mnt, canon, daemon.RunDirFor(e.root)))

	// session set changes the layout; a session without canonical paths
	// cannot run.
	e.ok("session", "create", "bare")
	e.fails(exitUsage, "records no canonical paths", "run", "bare", "--", "true")
	e.ok("session", "set", "bare", "--workspace-at", canon+"/bare")
	r = e.run("run", "bare", "--", "pwd")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, canon+"/bare\n", r.stdout)
	e.fails(exitUsage, "absolute path", "session", "set", "bare", "--workspace-at", "rel")

	// --capture captures when the command ends, whatever its status.
	r = e.run("run", "s", "--capture", "-m", "after the run", "--", "sh", "-c", "echo more >> note.txt; exit 1")
	require.Equal(t, 1, r.code, r.stderr)
	require.Contains(t, r.stderr, "captured s as")
	require.Contains(t, e.ok("log", "s"), "after the run")

	// A command that does not exist: 127, as a shell says.
	r = e.run("run", "s", "--", "no-such-command-homefs")
	require.Equal(t, 127, r.code, r.stderr)
}

// TestRunSignalsAndKill: a signal to homefs run reaches the command; a
// kill -9 of homefs run ends every process of the run and leaves no mount.
func TestRunSignalsAndKill(t *testing.T) {
	e, canon := newRunEnv(t, "codex-home")
	start := func(script string) *exec.Cmd {
		cmd := exec.Command(homefsBin, "run", "s", "--user", "nobody", "--", "sh", "-c", script)
		cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+e.root)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
		return cmd
	}
	cmd := start(`trap 'echo term > got; exit 5' TERM; touch ready; while :; do sleep 0.05; done`)
	waitForFile := func() {
		t.Helper()
		require.Eventually(t, func() bool {
			// The file is visible to the host through the session only.
			r := e.run("run", "s", "--", "test", "-e", "ready")
			return r.code == 0
		}, 20*time.Second, 50*time.Millisecond, "the command never started")
	}
	waitForFile()
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	err := cmd.Wait()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, 5, ee.ExitCode())
	r := e.run("run", "s", "--", "sh", "-c", "cat got; rm ready")
	require.Equal(t, "term\n", r.stdout, r.stderr)

	// kill -9 of homefs run: the command (and what it started) ends too.
	marker := `sleep 30[01]\.4242`
	cmd = start(`touch ready; sleep 300.4242 & sleep 301.4242`)
	waitForFile()
	require.Eventually(t, func() bool { return pgrep(marker) }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, cmd.Process.Kill())
	_, _ = cmd.Process.Wait()
	require.Eventually(t, func() bool { return !pgrep(marker) }, 10*time.Second, 20*time.Millisecond,
		"the run's processes outlived homefs run")
	require.Eventually(t, func() bool { return len(hostMounts(t, canon, daemon.RunDirFor(e.root))) == 0 }, 15*time.Second, 50*time.Millisecond,
		"the daemon kept the run's mount")
}

// accessibleAs reports whether cred may read and write path.
func accessibleAs(cred *syscall.Credential, path string) bool {
	cmd := exec.Command("sh", "-c", `test -r "$1" && test -w "$1"`, "sh", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd.Run() == nil
}

// pgrep reports whether a process whose command line contains s runs.
func pgrep(s string) bool {
	return exec.Command("pgrep", "-f", "^"+s).Run() == nil
}

// TestUnprivilegedDaemon: a daemon run by an ordinary user mounts through
// fusermount3 (--noatime too); without it, or without user_allow_other in
// /etc/fuse.conf for a mount other users may enter, the error says what is
// missing.
func TestUnprivilegedDaemon(t *testing.T) {
	e := newEnv(t)
	openUp(t, e.dir)
	require.NoError(t, os.Chown(e.dir, int(nobody.Uid), int(nobody.Gid)))
	e.daemonCred = nobody
	e.start()
	cli := func(args ...string) result { return e.runAs(nobody, nil, args...) }
	r := cli("session", "create", "s")
	require.Equal(t, 0, r.code, r.stderr)
	mnt := filepath.Join(e.dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	require.NoError(t, os.Chown(mnt, int(nobody.Uid), int(nobody.Gid)))

	if _, err := exec.LookPath("fusermount3"); err != nil {
		r = cli("mount", "s", mnt, "--private")
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, "fusermount3, which is not installed")
		if os.Getenv("CI") == "true" {
			t.Fatal("CI installs fuse3: the unprivileged mount must be tried")
		}
		t.Skip("fusermount3 not installed (apt-get install fuse3): only the error was checked")
	}
	if unix.Access("/dev/fuse", unix.R_OK|unix.W_OK) != nil {
		t.Fatal("the test runs as root")
	}
	if !accessibleAs(nobody, "/dev/fuse") {
		r = cli("mount", "s", mnt, "--private")
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, "needs read and write access to /dev/fuse")
		if os.Getenv("CI") == "true" {
			t.Fatal(".ci/run makes /dev/fuse 0666: the unprivileged mount must be tried")
		}
		t.Skip("/dev/fuse is not open to other users here: only the error was checked")
	}
	conf, _ := os.ReadFile("/etc/fuse.conf")
	if !strings.Contains("\n"+string(conf), "\nuser_allow_other") {
		r = cli("mount", "s", mnt)
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, "user_allow_other in /etc/fuse.conf")
	}
	// A private mount works, made by fusermount3, and serves its user.
	r = cli("mount", "s", mnt, "--private")
	require.Equal(t, 0, r.code, r.stderr)
	out, err := as(nobody, mnt, "echo unprivileged > f && cat f")
	require.NoError(t, err, out)
	require.Equal(t, "unprivileged\n", out)
	r = cli("unmount", mnt)
	require.Equal(t, 0, r.code, r.stderr)
	r = cli("mount", "s", mnt, "--private", "--read-only")
	require.Equal(t, 0, r.code, r.stderr)
	out, err = as(nobody, mnt, "cat f")
	require.NoError(t, err, out)
	require.Equal(t, "unprivileged\n", out)
	// Private: not even root may enter a FUSE mount of another user.
	_, err = os.ReadFile(filepath.Join(mnt, "f"))
	require.ErrorIs(t, err, os.ErrPermission)
	r = cli("unmount", mnt)
	require.Equal(t, 0, r.code, r.stderr)

	// --noatime reaches the kernel through fusermount3 too, and reads set
	// no atime, also the first one after a write.
	r = cli("mount", "s", mnt, "--private", "--noatime")
	require.Equal(t, 0, r.code, r.stderr)
	table, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	var opts []string
	for _, line := range strings.Split(string(table), "\n") {
		if f := strings.Fields(line); len(f) > 5 && f[4] == mnt {
			opts = strings.Split(f[5], ",")
		}
	}
	require.Contains(t, opts, "noatime", "mount options %v", opts)
	out, err = as(nobody, mnt, "echo more >> f && stat -c %x f && cat f >/dev/null && stat -c %x f")
	require.NoError(t, err, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Equal(t, lines[0], lines[1], "a read on a noatime mount set the atime")
	r = cli("unmount", mnt)
	require.Equal(t, 0, r.code, r.stderr)
}

// TestRunNeverFollowsSymlinks: the run's init works as root on paths the
// agent controls (the session's content, a canonical path's parents); a
// symlink planted there fails the run and never makes root create, chown
// or cover a directory elsewhere. CMD gains no privileges either.
func TestRunNeverFollowsSymlinks(t *testing.T) {
	e, canon := newRunEnv(t, "home")
	r := e.run("run", "s", "--", "sh", "-c", "grep NoNewPrivs /proc/self/status")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stdout, "NoNewPrivs:\t1")

	// In the session: the workspace replaced by a symlink to a host path.
	victim := e.mkdir("victim")
	mnt := e.mkdir("mnt")
	e.ok("mount", "s", mnt)
	require.NoError(t, os.RemoveAll(filepath.Join(mnt, "workspace")))
	require.NoError(t, os.Symlink(filepath.Join(victim, "made"), filepath.Join(mnt, "workspace")))
	e.fails(125, "symlink on the way", "run", "s", "--", "true")
	require.NoDirExists(t, filepath.Join(victim, "made"), "root made a directory through the session's symlink")
	require.NoError(t, os.Remove(filepath.Join(mnt, "workspace")))

	// Beside a canonical path: its parent replaced by a symlink.
	require.NoError(t, os.RemoveAll(filepath.Join(canon, "home")))
	require.NoError(t, os.Symlink(victim, filepath.Join(canon, "home")))
	e.fails(125, "symlink on the way", "run", "s", "--", "true")
	entries, err := os.ReadDir(victim)
	require.NoError(t, err)
	require.Empty(t, entries, "root made a directory through the canonical path's symlink")
}

// TestRunTerminal: on a terminal, CMD gets a pseudo-terminal of its own
// in a session of its own (so TIOCSTI cannot type into the caller's
// terminal), the relay carries input and output, and one Ctrl-C reaches
// CMD once.
func TestRunTerminal(t *testing.T) {
	e, _ := newRunEnv(t, "home")
	ptmx, tty, err := pty.Open()
	require.NoError(t, err)
	t.Cleanup(func() { ptmx.Close(); tty.Close() })
	cmd := exec.Command(homefsBin, "run", "s", "--user", "nobody", "--", "sh", "-c",
		`trap 'n=$((n+1)); echo "INT$n"' INT; echo "tty=$(tty)"; echo ready; while :; do if read -r x; then echo "got $x"; [ "$x" = quit ] && exit 0; fi; done`)
	cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+e.root)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	out := bufio.NewReader(ptmx)
	until := func(want string) string {
		t.Helper()
		var seen strings.Builder
		for {
			line, err := out.ReadString('\n')
			seen.WriteString(line)
			require.NoError(t, err, "waiting for %q, read %q", want, seen.String())
			if strings.Contains(line, want) {
				return seen.String()
			}
		}
	}
	lines := until("ready")
	i := strings.Index(lines, "tty=")
	require.GreaterOrEqual(t, i, 0, lines)
	inner := strings.TrimSpace(strings.SplitN(lines[i+4:], "\n", 2)[0])
	require.True(t, strings.HasPrefix(inner, "/dev/pts/"), "CMD's terminal %q", inner)
	require.NotEqual(t, tty.Name(), inner, "CMD has the caller's terminal")

	_, err = ptmx.Write([]byte{3}) // Ctrl-C
	require.NoError(t, err)
	until("INT1")
	_, err = ptmx.Write([]byte("hello\n"))
	require.NoError(t, err)
	between := until("got hello")
	require.NotContains(t, between, "INT2", "one Ctrl-C reached CMD twice")
	_, err = ptmx.Write([]byte("quit\n"))
	require.NoError(t, err)
	until("got quit")
	require.NoError(t, cmd.Wait())
}

// TestRunSkipsAMountGoneBehindTheDaemon: a daemon mount unmounted behind
// the daemon's back is not shared with a run (whose writes would land on
// the host's disk); the run makes its own and the writes reach the session.
func TestRunSkipsAMountGoneBehindTheDaemon(t *testing.T) {
	e, _ := newRunEnv(t, "home")
	mnt := e.mkdir("mnt")
	e.ok("mount", "s", mnt)
	require.NoError(t, syscall.Unmount(mnt, 0))
	r := e.run("run", "s", "--", "sh", "-c", "echo kept > kept.txt")
	require.Equal(t, 0, r.code, r.stderr)
	require.NoDirExists(t, filepath.Join(mnt, "workspace"), "the run wrote into the bare directory")
	r = e.run("run", "s", "--", "cat", "kept.txt")
	require.Equal(t, "kept\n", r.stdout, r.stderr)
	// Only root reaches a running session through the daemon's mount.
	r = e.run("run", "s", "--", "stat", "-c", "%a", daemon.RunDirFor(e.root), filepath.Dir(daemon.RunDirFor(e.root)))
	require.Equal(t, "700\n700\n", r.stdout, r.stderr)
	// The daemon lets the mount go once the run's request has closed.
	require.Eventually(t, func() bool {
		_, err := os.Stat(daemon.RunDirFor(e.root) + "/s")
		return errors.Is(err, os.ErrNotExist)
	}, 20*time.Second, 20*time.Millisecond, "the run's mount directory stayed")
}

// TestRunLostWhenDaemonStops: a daemon that stops (or dies) during a run
// ends its hold: the command is told to end and homefs run exits 125
// saying so.
func TestRunLostWhenDaemonStops(t *testing.T) {
	for _, stop := range []string{"stop", "crash"} {
		t.Run(stop, func(t *testing.T) {
			e, _ := newRunEnv(t, "home")
			started := filepath.Join(e.dir, "started")
			cmd := exec.Command(homefsBin, "run", "s", "--", "sh", "-c",
				`trap 'exit 0' TERM; touch "$1"; while :; do sleep 0.05; done`, "sh", started)
			cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+e.root)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
			waitFor(t, "the command to start", func() bool { _, err := os.Stat(started); return err == nil })
			if stop == "stop" {
				e.stop()
			} else {
				e.crash()
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			require.ErrorAs(t, err, &ee, stderr.String())
			require.Equal(t, 125, ee.ExitCode(), stderr.String())
			require.Contains(t, stderr.String(), "the daemon stopped serving s during the run")
		})
	}
}
