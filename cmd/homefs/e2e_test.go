package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/internal/testkit/needfuse"
)

// The end-to-end tests build the binary once and drive it as a user does:
// a daemon per test on its own root, commands with their exit codes.

var homefsBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "homefs-e2e-bin")
	if err != nil {
		panic(err)
	}
	// homefs and, beside it, homefsd, which homefs serve runs.
	homefsBin = filepath.Join(dir, "homefs")
	out, err := exec.Command("go", "build", "-race", "-o", dir+"/", ".", "../homefsd").CombinedOutput()
	if err != nil {
		// Without the race detector (not every toolchain has it).
		out, err = exec.Command("go", "build", "-o", dir+"/", ".", "../homefsd").CombinedOutput()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "build homefs and homefsd: %v\n%s", err, out)
		os.Exit(1)
	}
	// Readable by the unprivileged user of the non-owner test.
	_ = os.Chmod(dir, 0o755)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needFUSE skips a test that cannot mount here, or fails it under CI.
func needFUSE(t *testing.T) {
	t.Helper()
	needfuse.Require(t)
}

type env struct {
	t    *testing.T
	root string
	dir  string // scratch space beside the root
	proc *exec.Cmd
	logs *syncBuffer
	done chan error
	// daemonEnv is added to the daemon's environment only (remote
	// credentials), never to the commands'.
	daemonEnv []string
	// daemonCred, when set, runs the daemon as that user.
	daemonCred *syscall.Credential
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func newEnv(t *testing.T) *env {
	t.Helper()
	needFUSE(t)
	dir := t.TempDir()
	e := &env{t: t, root: filepath.Join(dir, "root"), dir: dir}
	t.Cleanup(func() {
		if e.proc != nil {
			e.stop()
		}
		// Anything a failed test left mounted.
		ms, _ := os.ReadFile("/proc/self/mountinfo")
		for _, line := range strings.Split(string(ms), "\n") {
			f := strings.Fields(line)
			if len(f) > 4 && strings.HasPrefix(f[4], dir) {
				_ = syscall.Unmount(f[4], syscall.MNT_DETACH)
			}
		}
		if t.Failed() && e.logs != nil {
			t.Logf("daemon log:\n%s", e.logs.String())
		}
		// Backing files a restarted daemon sealed (chattr +i) stay until
		// its next start: the temporary directory could not go.
		unsealUnder(filepath.Join(e.root, "backing"))
	})
	return e
}

// unsealUnder clears the immutable flag of every file under dir.
func unsealUnder(dir string) {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return nil
		}
		defer f.Close()
		if flags, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS); err == nil && flags&fsImmutableFL != 0 {
			_ = unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(flags&^fsImmutableFL))
		}
		return nil
	})
}

// fsImmutableFL is FS_IMMUTABLE_FL of linux/fs.h (chattr +i).
const fsImmutableFL = 0x10

func (e *env) socket() string { return filepath.Join(e.root, api.SocketName) }

// start runs the daemon, with extra arguments to serve, and waits until
// it answers. The daemon serves its mounts over FUSE over io_uring,
// turning the host's switch on if it is off (and off again when it
// stops), so that the tests run over the daemon's fastest transport
// wherever the kernel has it; --fuse-uring in extra says otherwise.
func (e *env) start(extra ...string) {
	e.t.Helper()
	e.logs = &syncBuffer{}
	cmd := exec.Command(homefsBin, append([]string{"serve", "--log-level", "debug", "--fuse-uring=on"}, extra...)...)
	cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+e.root, "GORACE=atexit_sleep_ms=0")
	if s3test.Encrypted() {
		cmd.Env = append(cmd.Env, s3test.KeyEnv+"="+s3test.TestKey)
	}
	cmd.Env = append(cmd.Env, e.daemonEnv...)
	if e.daemonCred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: e.daemonCred}
	}
	cmd.Stdout, cmd.Stderr = e.logs, e.logs
	require.NoError(e.t, cmd.Start())
	e.proc = cmd
	e.done = make(chan error, 1)
	go func() { e.done <- cmd.Wait() }()
	c := api.NewClient(e.socket())
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := c.Status(context.Background())
		if err == nil || errors.Is(err, &api.Error{Code: api.CodePermission}) {
			return // a daemon of another user answers too, with a refusal
		}
		select {
		case err := <-e.done:
			e.t.Fatalf("daemon exited at start: %v\n%s", err, e.logs.String())
		default:
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("daemon did not answer in time:\n%s", e.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startMounted starts a daemon of a new env with session "s" mounted at
// the env directory name, and returns the env and the mountpoint.
func startMounted(t *testing.T, name string) (*env, string) {
	t.Helper()
	e := newEnv(t)
	e.start()
	mnt := e.mkdir(name)
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)
	return e, mnt
}

// stop sends SIGTERM and waits for a clean exit.
func (e *env) stop() {
	e.t.Helper()
	require.NoError(e.t, e.proc.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-e.done:
		require.NoError(e.t, err, "daemon exit:\n%s", e.logs.String())
	case <-time.After(60 * time.Second):
		_ = e.proc.Process.Kill()
		e.t.Fatalf("daemon did not stop:\n%s", e.logs.String())
	}
	e.proc = nil
}

// crash kills the daemon with SIGKILL.
func (e *env) crash() {
	e.t.Helper()
	require.NoError(e.t, e.proc.Process.Kill())
	<-e.done
	e.proc = nil
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs a homefs command against this env's daemon.
func (e *env) run(args ...string) result {
	e.t.Helper()
	return e.runAs(nil, nil, args...)
}

func (e *env) runStdin(stdin []byte, args ...string) result {
	e.t.Helper()
	return e.runAs(nil, stdin, args...)
}

func (e *env) runAs(cred *syscall.Credential, stdin []byte, args ...string) result {
	e.t.Helper()
	return e.runEnv(cred, stdin, nil, args...)
}

// runEnv is runAs with extra environment variables, which override the
// env's own.
//
// With s3test.Encrypted, a remote add that names no encryption of its own
// adds an encrypted remote (key s3test.TestKey, from the daemon's
// environment), so that every remote test runs encrypted too.
func (e *env) runEnv(cred *syscall.Credential, stdin []byte, extraEnv []string, args ...string) result {
	e.t.Helper()
	if s3test.Encrypted() && len(args) > 2 && args[0] == "remote" && args[1] == "add" && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--encrypt") }) {
		args = append(slices.Clone(args), "--encrypt", "--key-env", s3test.KeyEnv)
	}
	cmd := exec.Command(homefsBin, args...)
	cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+e.root, "GORACE=atexit_sleep_ms=0")
	cmd.Env = append(cmd.Env, extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(e.t, err)
	}
	return result{out.String(), errb.String(), code}
}

// ok runs a command that must succeed and returns its stdout.
func (e *env) ok(args ...string) string {
	e.t.Helper()
	r := e.run(args...)
	require.Equal(e.t, 0, r.code, "homefs %v: %s%s", args, r.stderr, r.stdout)
	return r.stdout
}

// fails runs a command that must exit with code and mention want.
func (e *env) fails(code int, want string, args ...string) result {
	e.t.Helper()
	r := e.run(args...)
	require.Equal(e.t, code, r.code, "homefs %v: stdout %q stderr %q", args, r.stdout, r.stderr)
	require.Contains(e.t, r.stderr, want, "homefs %v", args)
	return r
}

func (e *env) mkdir(name string) string {
	p := filepath.Join(e.dir, name)
	require.NoError(e.t, os.MkdirAll(p, 0o755))
	return p
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

func isMounted(t *testing.T, dir string) bool {
	t.Helper()
	ms, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(string(ms), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

const rollout = "codex-home/sessions/2025/06/01/rollout-2025-06-01T10-00-00-0197a1b2.jsonl"

func TestNotRunning(t *testing.T) {
	e := newEnv(t)
	e.fails(exitNotRunning, "homefs daemon is not running (no socket at "+e.socket()+"): start it with `homefs serve`", "session", "list")
	e.fails(exitUsage, "want NAME", "session", "create")
}

// TestAppFlagsAfterCommand checks that --root and --socket work after the
// command name, as a command's own flags do, and that "--" still ends the
// flags.
func TestAppFlagsAfterCommand(t *testing.T) {
	e := newEnv(t)
	// $HOMEFS_ROOT names a root nothing serves: only the flags find it.
	elsewhere := []string{"HOMEFS_ROOT=" + filepath.Join(e.dir, "elsewhere")}
	e.daemonEnv = elsewhere
	e.start("--root", e.root)
	run := func(args ...string) result {
		t.Helper()
		return e.runEnv(nil, nil, elsewhere, args...)
	}
	ok := func(args ...string) string {
		t.Helper()
		r := run(args...)
		require.Equal(t, 0, r.code, "homefs %v: %s%s", args, r.stderr, r.stdout)
		return r.stdout
	}
	require.Equal(t, exitNotRunning, run("session", "list").code, "the environment's root is not served")

	ok("session", "create", "s", "--root", e.root)
	require.Contains(t, ok("session", "list", "--root", e.root, "--json"), `"s"`)
	require.Contains(t, ok("session", "--root="+e.root, "list"), "s")
	mnt := e.mkdir("mnt")
	ok("mount", "s", mnt, "--socket", e.socket(), "--read-only")
	require.True(t, isMounted(t, mnt))
	ok("unmount", "--socket="+e.socket(), mnt)
	// A later --root wins over an earlier one, as before the command.
	ok("--root", filepath.Join(e.dir, "elsewhere"), "stats", "--root", e.root)

	// After "--" a flag is an argument: here, a bad session name.
	r := run("session", "create", "--root", e.root, "--", "--root")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "session name")
	r = run("serve", "--root")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, "flag needs an argument: -root")
}

// TestMountMissingSubtree checks that mounting a subtree that does not
// exist creates it, and that a read-only or snapshot mount of one fails
// as not found.
func TestMountMissingSubtree(t *testing.T) {
	e, root := startMounted(t, "whole")
	snap := strings.TrimSpace(e.ok("capture", "s"))
	ro, sub := e.mkdir("ro"), e.mkdir("sub")
	e.fails(exitNotFound, "no such subtree: codex-home/tmp (a read-only or snapshot mount does not create it; a writable mount of the session does)", "mount", "s/codex-home/tmp", ro, "--read-only")
	e.fails(exitNotFound, "no such subtree", "mount", "s/codex-home/tmp", ro, "--snapshot", snap)
	require.NoDirExists(t, filepath.Join(root, "codex-home"))

	e.ok("mount", "s/codex-home/tmp", sub)
	writeFile(t, filepath.Join(sub, "arg0/x"), "x")
	require.Equal(t, "x", readFile(t, filepath.Join(root, "codex-home/tmp/arg0/x")))
	fi, err := os.Stat(filepath.Join(root, "codex-home"))
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|0o755, fi.Mode())
	writeFile(t, filepath.Join(root, "f"), "not a directory")
	e.fails(exitNotFound, "not a directory", "mount", "s/f", e.mkdir("f"))
}

func TestSessionsMountsCaptureForkDiff(t *testing.T) {
	e := newEnv(t)
	e.start()
	src, fork := e.mkdir("src"), e.mkdir("fork")

	e.ok("session", "create", "agent-1")
	e.fails(exitConflict, "exists", "session", "create", "agent-1")
	e.fails(exitUsage, "session name", "session", "create", "bad/name")
	e.fails(exitUsage, "flag provided but not defined", "session", "create", "x", "--bogus")
	e.ok("mount", "agent-1", src)
	writeFile(t, filepath.Join(src, rollout), "{\"type\":\"session_meta\"}\n")
	writeFile(t, filepath.Join(src, "workspace/README.md"), "# demo\n")

	// Mountpoint errors: busy, inside the root, missing; unknown session.
	e.fails(exitConflict, "busy", "mount", "agent-1", src)
	e.fails(exitUsage, "overlaps", "mount", "agent-1", e.root)
	e.fails(exitNotFound, "no such file", "mount", "agent-1", filepath.Join(e.dir, "missing"))
	e.fails(exitNotFound, "no such session", "mount", "nobody", e.mkdir("other"))
	e.fails(exitConflict, "mounted", "session", "rm", "agent-1")

	snap := strings.TrimSpace(e.ok("capture", "agent-1", "-m", "turn 1", "--handle", "codex=0197a1b2@1"))
	require.Len(t, snap, 64)
	e.fails(exitUsage, "PROVIDER=ID", "capture", "agent-1", "--handle", "nonsense")
	e.fails(exitNotFound, "no such session", "capture", "nobody")

	e.ok("fork", "agent-1@"+snap[:12], "agent-1-retry")
	e.fails(exitConflict, "exists", "fork", "agent-1", "agent-1-retry")
	e.fails(exitNotFound, "no such snapshot", "fork", "agent-1@deadbeefdead", "x")
	e.fails(exitUsage, "want 8 to 64 hex digits", "fork", "agent-1@abcd", "x")
	e.fails(exitUsage, "want 8 to 64 hex digits", "restore", "agent-1", "abcd")
	e.fails(exitUsage, "argument 1 is empty", "log", "")
	e.fails(exitNotFound, "nobody", "fork", "nobody", "x")
	e.ok("mount", "agent-1-retry", fork)
	checkForkDiff(e, fork, snap)

	snap2 := strings.TrimSpace(e.ok("capture", "agent-1-retry", "-m", "retry"))
	var log []api.SnapshotInfo
	require.NoError(t, json.Unmarshal([]byte(e.ok("log", "agent-1-retry", "--json")), &log))
	require.Len(t, log, 2)
	require.Equal(t, snap2, log[0].ID)
	require.Equal(t, snap, log[1].ID)
	require.True(t, log[1].ForkPoint)
	require.Contains(t, e.ok("log", "agent-1-retry"), "fork point")
	e.fails(exitNotFound, "no such session", "log", "nobody")

	var sessions []api.SessionInfo
	require.NoError(t, json.Unmarshal([]byte(e.ok("session", "list", "--json")), &sessions))
	require.Len(t, sessions, 2)
	require.Equal(t, []string{src}, sessions[0].Mounts)

	// Restore the fork to the fork point while mounted.
	e.ok("restore", "agent-1-retry", snap)
	require.Equal(t, "{\"type\":\"session_meta\"}\n", readFile(t, filepath.Join(fork, rollout)))
	e.fails(exitNotFound, "no such snapshot", "restore", "agent-1-retry", "0000000000")
	e.fails(exitNotFound, "no such session", "restore", "nobody", snap)

	// A read-only snapshot mount.
	ro := e.mkdir("ro")
	e.ok("mount", "agent-1-retry", ro, "--snapshot", snap2[:12])
	require.Equal(t, "notes\n", readFile(t, filepath.Join(ro, "workspace/NOTES.md")))
	require.Error(t, os.WriteFile(filepath.Join(ro, "x"), []byte("x"), 0o644))
	e.ok("unmount", ro)
	e.fails(exitNotFound, "not a homefs mount", "unmount", ro)

	// Unmount is refused while a file is open, then works.
	h, err := os.Open(filepath.Join(fork, rollout))
	require.NoError(t, err)
	e.fails(exitConflict, "busy", "unmount", fork)
	require.NoError(t, h.Close())
	e.ok("unmount", fork)
	require.False(t, isMounted(t, fork))
	e.ok("session", "rm", "agent-1-retry")
	e.fails(exitNotFound, "no such session", "session", "rm", "agent-1-retry")

	checkSecondDaemonAndStats(e)

	e.stop()
	require.False(t, isMounted(t, src), "the daemon unmounts at SIGTERM")
	// Everything written is there after a restart.
	e.start()
	e.ok("mount", "agent-1", src)
	require.Equal(t, "# demo\n", readFile(t, filepath.Join(src, "workspace/README.md")))
}

// checkForkDiff changes the fork mounted at fork (a line appended to the
// rollout, a file added, one removed) and requires diff to name exactly
// those changes against agent-1, and no difference between snap and
// agent-1.
func checkForkDiff(e *env, fork, snap string) {
	t := e.t
	t.Helper()
	f, err := os.OpenFile(filepath.Join(fork, rollout), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.WriteString("{\"type\":\"response_item\"}\n")
	require.NoError(t, err)
	require.NoError(t, f.Close())
	writeFile(t, filepath.Join(fork, "workspace/NOTES.md"), "notes\n")
	require.NoError(t, os.Remove(filepath.Join(fork, "workspace/README.md")))

	var d api.DiffResult
	require.NoError(t, json.Unmarshal([]byte(e.ok("diff", "agent-1", "agent-1-retry", "--json")), &d))
	changes := map[string]string{}
	for _, x := range d.Entries {
		changes[x.Path] = x.Change
	}
	require.Equal(t, map[string]string{
		rollout:               api.Changed,
		"workspace/NOTES.md":  api.Added,
		"workspace/README.md": api.Removed,
	}, changes)
	require.Contains(t, e.ok("diff", "@"+snap, "agent-1"), "no differences")
	e.fails(exitNotFound, "no such snapshot", "diff", "agent-1", "@ffffffffffff")
}

// checkSecondDaemonAndStats requires a second daemon on the root to fail
// clearly, and stats, fsck and gc to report on the one session and two
// snapshots TestSessionsMountsCaptureForkDiff leaves.
func checkSecondDaemonAndStats(e *env) {
	t := e.t
	t.Helper()
	// A second daemon on the same root fails clearly.
	r := e.run("serve")
	require.NotEqual(t, 0, r.code)
	require.Contains(t, r.stderr, "another homefs daemon is running")

	var st struct {
		Sessions  int `json:"sessions"`
		Snapshots int `json:"snapshots"`
	}
	require.NoError(t, json.Unmarshal([]byte(e.ok("stats", "--json")), &st))
	require.Equal(t, 1, st.Sessions)
	require.Equal(t, 2, st.Snapshots)
	require.Contains(t, e.ok("stats"), "dedup ratio")
	require.Contains(t, e.ok("fsck"), "0 problems")
	require.Contains(t, e.ok("gc"), "freed")
}

func TestExportImport(t *testing.T) {
	e, src := startMounted(t, "src")
	big := strings.Repeat("0123456789", 30000)
	writeFile(t, filepath.Join(src, rollout), "{\"a\":1}\n")
	writeFile(t, filepath.Join(src, "big.txt"), big)
	require.NoError(t, os.Symlink("big.txt", filepath.Join(src, "link")))
	snap := strings.TrimSpace(e.ok("capture", "s"))

	out := filepath.Join(e.dir, "out")
	e.ok("export", snap, out)
	require.Equal(t, big, readFile(t, filepath.Join(out, "big.txt")))
	l, err := os.Readlink(filepath.Join(out, "link"))
	require.NoError(t, err)
	require.Equal(t, "big.txt", l)
	e.fails(exitConflict, "not empty", "export", snap, out)
	e.fails(exitNotFound, "no such snapshot", "export", "abcdefabcdef", filepath.Join(e.dir, "x"))

	tarOut := e.ok("export", snap, "-")
	names := tarNames(t, []byte(tarOut))
	require.Contains(t, names, "big.txt")
	require.Contains(t, names, rollout)

	// Import the exported directory and the tar stream; same content.
	e.ok("import", out, "from-dir")
	e.runStdinOK([]byte(tarOut), "import", "-", "from-tar")
	tarFile := filepath.Join(e.dir, "s.tar")
	require.NoError(t, os.WriteFile(tarFile, []byte(tarOut), 0o644))
	e.ok("import", tarFile, "from-file")
	require.Contains(t, e.ok("diff", "s", "from-dir"), "no differences")
	require.Contains(t, e.ok("diff", "s", "from-tar"), "no differences")
	e.fails(exitConflict, "exists", "import", tarFile, "from-file")
	e.fails(exitNotFound, "no such file", "import", filepath.Join(e.dir, "nope.tar"), "x")

	// Bad archives: refused, and nothing created.
	for name, data := range map[string][]byte{
		"malformed":        bytes.Repeat([]byte("garbage!"), 200),
		"truncated":        []byte(tarOut)[:700],
		"dotdot":           mkTar(t, tarEntry{name: "a/../../escape", body: "x"}),
		"absolute":         mkTar(t, tarEntry{name: "/etc/evil", body: "x"}),
		"below-symlink":    mkTar(t, tarEntry{name: "l", link: e.dir, typ: tar.TypeSymlink}, tarEntry{name: "l/escape", body: "x"}),
		"hardlink-outside": mkTar(t, tarEntry{name: "h", link: "../x", typ: tar.TypeLink}),
		"device":           mkTar(t, tarEntry{name: "null", typ: tar.TypeChar}),
	} {
		r := e.runStdin(data, "import", "-", "bad-"+name)
		require.Equal(t, exitUsage, r.code, "%s: %s", name, r.stderr)
		require.Contains(t, r.stderr, "archive", name)
		e.fails(exitNotFound, "no such session", "log", "bad-"+name)
	}
	require.NoFileExists(t, filepath.Join(e.dir, "escape"))
}

// TestImportSymlinkArgument checks that "homefs import LINK S", LINK a
// symlink to a directory, imports that directory (following only the
// argument), not an empty session.
func TestImportSymlinkArgument(t *testing.T) {
	e := newEnv(t)
	e.start()
	home := e.mkdir("codex-home")
	writeFile(t, filepath.Join(home, rollout), "{}\n")
	require.NoError(t, os.Symlink("/usr/lib/node_modules/@openai/codex", filepath.Join(home, "inner")))
	link := filepath.Join(e.dir, "dot-codex")
	require.NoError(t, os.Symlink("codex-home", link))

	var res api.ImportResult
	require.NoError(t, json.Unmarshal([]byte(e.ok("import", link, "s", "--json")), &res))
	require.EqualValues(t, 1, res.Files)
	require.EqualValues(t, 1, res.Symlinks)
	e.ok("import", home, "direct")
	require.Contains(t, e.ok("diff", "s", "direct"), "no differences")
	mnt := e.mkdir("mnt")
	e.ok("mount", "s", mnt)
	require.Equal(t, "{}\n", readFile(t, filepath.Join(mnt, rollout)))
	l, err := os.Readlink(filepath.Join(mnt, "inner"))
	require.NoError(t, err)
	require.Equal(t, "/usr/lib/node_modules/@openai/codex", l)
}

// TestExportImportSymlinksLeavingTheTree checks that symlinks to absolute
// paths and out of the tree, as Codex makes under tmp/arg0, round-trip
// through export and import, to a directory and as a tar stream, with
// their targets byte for byte, and that none is followed.
func TestExportImportSymlinksLeavingTheTree(t *testing.T) {
	e, src := startMounted(t, "src")
	outside := e.mkdir("outside") // a real directory the links reach
	links := map[string]string{
		"codex-home/tmp/arg0/codex-arg0Xy/codex-linux-sandbox": "/usr/lib/node_modules/@openai/codex/bin/codex-x86_64-unknown-linux-musl",
		"codex-home/tmp/arg0/codex-arg0Xy/apply_patch":         "/usr/lib/node_modules/@openai/codex/bin/codex-x86_64-unknown-linux-musl",
		"out":    outside,
		"up":     "../../../etc",
		"dangle": "/nonexistent/x",
	}
	for name, target := range links {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(src, name)), 0o755))
		require.NoError(t, os.Symlink(target, filepath.Join(src, name)))
	}
	snap := strings.TrimSpace(e.ok("capture", "s"))
	requireLinks := func(dir string) {
		t.Helper()
		for name, target := range links {
			l, err := os.Readlink(filepath.Join(dir, name))
			require.NoError(t, err, name)
			require.Equal(t, target, l, name)
		}
	}

	out := filepath.Join(e.dir, "out")
	e.ok("export", snap, out)
	requireLinks(out)
	e.ok("import", out, "from-dir")
	tarOut := e.ok("export", snap, "-")
	e.runStdinOK([]byte(tarOut), "import", "-", "from-tar")
	for _, s := range []string{"from-dir", "from-tar"} {
		require.Contains(t, e.ok("diff", "s", s), "no differences", s)
		mnt := e.mkdir("mnt-" + s)
		e.ok("mount", s, mnt, "--read-only")
		requireLinks(mnt)
		e.ok("unmount", mnt)
	}
	again := filepath.Join(e.dir, "again")
	e.ok("export", strings.TrimSpace(e.ok("capture", "from-tar")), again)
	requireLinks(again)
	left, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, left, "nothing written through a link")
}

func (e *env) runStdinOK(stdin []byte, args ...string) string {
	e.t.Helper()
	r := e.runStdin(stdin, args...)
	require.Equal(e.t, 0, r.code, "homefs %v: %s", args, r.stderr)
	return r.stdout
}

type tarEntry struct {
	name, link, body string
	typ              byte
}

func mkTar(t *testing.T, ents ...tarEntry) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, x := range ents {
		typ := x.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		h := &tar.Header{Name: x.name, Linkname: x.link, Typeflag: typ, Mode: 0o644}
		if typ == tar.TypeReg {
			h.Size = int64(len(x.body))
		}
		require.NoError(t, tw.WriteHeader(h))
		if typ == tar.TypeReg {
			_, err := tw.Write([]byte(x.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func tarNames(t *testing.T, data []byte) []string {
	tr := tar.NewReader(bytes.NewReader(data))
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, strings.TrimSuffix(h.Name, "/"))
	}
	return names
}

func TestCrashRecovery(t *testing.T) {
	e, mnt := startMounted(t, "mnt")
	writeFile(t, filepath.Join(mnt, "captured.txt"), "safe\n")
	e.ok("capture", "s", "-m", "before the crash")

	e.crash()
	require.True(t, isMounted(t, mnt), "a crash leaves the mount behind")

	e.start()
	require.False(t, isMounted(t, mnt), "restart detaches the stale mount")
	require.Contains(t, e.logs.String(), "detached stale mount")
	require.Contains(t, e.ok("session", "list"), "s")
	e.ok("mount", "s", mnt)
	require.Equal(t, "safe\n", readFile(t, filepath.Join(mnt, "captured.txt")))
	require.Contains(t, e.ok("fsck"), "0 problems")
}

// TestCrashKeepsUnsyncedAppends: Codex's rollout, appended through an
// O_RDWR|O_APPEND descriptor and never fsynced, loses no append that
// returned to a kill -9 of serve, as a process crash on ext4 loses none.
func TestCrashKeepsUnsyncedAppends(t *testing.T) {
	e, mnt := startMounted(t, "mnt")
	rollout := filepath.Join(mnt, "rollout.jsonl")
	want := `{"type":"session_meta"}` + "\n"
	writeFile(t, rollout, want)
	e.ok("capture", "s", "-m", "the rollout exists")
	f, err := os.OpenFile(rollout, os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	for i := range 500 {
		line := fmt.Sprintf(`{"turn":%d,"payload":"%s"}`+"\n", i, strings.Repeat("x", i%300))
		_, err := f.WriteString(line)
		require.NoError(t, err)
		want += line
	}

	e.crash()
	_ = f.Close() // the mount is dead
	e.start()
	e.ok("mount", "s", mnt)
	require.Equal(t, want, readFile(t, rollout))
}

// TestStartDetachesDeadMountsOnly: a kill -9 leaves a dead mount that
// mounts.json does not name (the file is gone); the next serve detaches
// it, and leaves the live mount of a second daemon alone.
func TestStartDetachesDeadMountsOnly(t *testing.T) {
	a, mntA := startMounted(t, "a")
	writeFile(t, filepath.Join(mntA, "a.txt"), "a\n")
	a.ok("capture", "s", "-m", "before the crash")
	b, mntB := startMounted(t, "b")
	writeFile(t, filepath.Join(mntB, "b.txt"), "b\n")

	a.crash()
	require.NoError(t, os.Remove(filepath.Join(a.root, "mounts.json")))
	require.Eventually(t, func() bool {
		var st syscall.Statfs_t
		return errors.Is(syscall.Statfs(mntA, &st), syscall.ENOTCONN)
	}, 10*time.Second, 10*time.Millisecond, "the crashed daemon's mount answers ENOTCONN")

	a.start()
	require.False(t, isMounted(t, mntA), "the dead mount is detached")
	require.True(t, isMounted(t, mntB), "the live mount of the other daemon stays")
	require.Equal(t, "b\n", readFile(t, filepath.Join(mntB, "b.txt")))
	a.ok("mount", "s", mntA)
	require.Equal(t, "a\n", readFile(t, filepath.Join(mntA, "a.txt")))
	b.ok("unmount", mntB)
}

func TestNonOwner(t *testing.T) {
	e := newEnv(t)
	e.start()
	// Let uid 65534 reach the socket's directory.
	for p := e.root; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		require.NoError(t, os.Chmod(p, 0o755))
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	r := e.runAs(nobody, nil, "session", "list")
	require.Equal(t, exitOther, r.code, r.stderr)
	require.Contains(t, r.stderr, "permission denied on "+e.socket())

	// Even with the socket opened up, the daemon checks the peer's uid.
	require.NoError(t, os.Chmod(e.socket(), 0o666))
	r = e.runAs(nobody, nil, "session", "list")
	require.Equal(t, exitOther, r.code, r.stderr)
	require.Contains(t, r.stderr, "uid 65534 may not use this homefs daemon")
}

func TestGCRacingWriters(t *testing.T) {
	e, mnt := startMounted(t, "mnt")

	want := make(map[string]string)
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 3; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				name := fmt.Sprintf("w%d/f%d", w, i%5)
				content := strings.Repeat(fmt.Sprintf("%d-%d;", w, i), 2000+i%7*3000)
				p := filepath.Join(mnt, name)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Error(err)
					return
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				want[name] = content
				mu.Unlock()
			}
		}()
	}
	for i := 0; i < 4; i++ {
		e.ok("gc")
		if i == 1 {
			e.ok("capture", "s")
		}
	}
	close(stop)
	wg.Wait()
	e.ok("gc")
	require.Contains(t, e.ok("fsck"), "0 problems")
	for name, content := range want {
		require.Equal(t, content, readFile(t, filepath.Join(mnt, name)), name)
	}
	// And from the store itself, after a restart.
	e.ok("unmount", mnt)
	e.stop()
	e.start()
	snap := strings.TrimSpace(e.ok("capture", "s"))
	out := filepath.Join(e.dir, "out")
	e.ok("export", snap, out)
	for name, content := range want {
		require.Equal(t, content, readFile(t, filepath.Join(out, name)), name)
	}
}

func TestFsckFindsCorruptChunk(t *testing.T) {
	e, mnt := startMounted(t, "mnt")
	content := strings.Repeat("precious bytes ", 100)
	writeFile(t, filepath.Join(mnt, "dir/victim.txt"), content)
	writeFile(t, filepath.Join(mnt, "fine.txt"), "fine")
	e.ok("capture", "s")
	e.stop()

	// Damage the chunk on disk while the daemon is stopped.
	st, err := badgerstore.Open(filepath.Join(e.root, "store"), badgerstore.Options{})
	require.NoError(t, err)
	require.NoError(t, st.CorruptForTest(cas.Sum([]byte(content))))
	require.NoError(t, st.Close())

	e.start()
	r := e.fails(exitCorrupt, "fsck found problems", "fsck")
	require.Contains(t, r.stdout, "session s: dir/victim.txt: chunk")
	require.Contains(t, r.stdout, "snapshot")
	var rep struct {
		Problems []struct{ Owner, Path string }
	}
	r = e.run("fsck", "--json")
	require.Equal(t, exitCorrupt, r.code)
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rep))
	require.Len(t, rep.Problems, 2)
	e.fails(exitCorrupt, "corrupt", "export", "s", filepath.Join(e.dir, "out"))
}

// TestForkDropsDerivedState: a session made from another one's tree drops
// the state Codex derives from absolute paths (state_5.sqlite), so that a
// harness in it rebuilds its state instead of following the paths back
// into the source; the source keeps its own, and the rollouts stay.
func TestForkDropsDerivedState(t *testing.T) {
	e := newEnv(t)
	e.start()
	src := e.mkdir("src")
	e.ok("session", "create", "a")
	e.ok("mount", "a", src)
	writeFile(t, filepath.Join(src, rollout), "{\"type\":\"session_meta\"}\n")
	writeFile(t, filepath.Join(src, "codex-home/state_5.sqlite"), "db naming "+src+"\n")
	writeFile(t, filepath.Join(src, "codex-home/state_5.sqlite-wal"), "wal\n")
	writeFile(t, filepath.Join(src, "codex-home/logs_2.sqlite"), "logs\n")

	var info api.SessionInfo
	require.NoError(t, json.Unmarshal([]byte(e.ok("fork", "a", "b", "--json")), &info))
	require.Contains(t, info.DroppedDerived, "codex-home/state_5.sqlite")
	require.Contains(t, info.DroppedDerived, "codex-home/state_5.sqlite-wal")

	fork := e.mkdir("fork")
	e.ok("mount", "b", fork)
	_, err := os.Stat(filepath.Join(fork, "codex-home/state_5.sqlite"))
	require.ErrorIs(t, err, os.ErrNotExist)
	require.FileExists(t, filepath.Join(fork, rollout))
	require.FileExists(t, filepath.Join(fork, "codex-home/logs_2.sqlite"))
	require.FileExists(t, filepath.Join(src, "codex-home/state_5.sqlite"))

	// The same holds for a session created from a snapshot.
	snap := strings.TrimSpace(e.ok("capture", "a"))
	require.NoError(t, json.Unmarshal([]byte(e.ok("session", "create", "c", "--from", snap, "--json")), &info))
	require.Contains(t, info.DroppedDerived, "codex-home/state_5.sqlite")
}

// TestSecondSignalExits: a shutdown that waits (here for a mount a process
// keeps busy) ends at once at a second SIGTERM, as a crash would, and the
// next serve recovers.
func TestSecondSignalExits(t *testing.T) {
	e, mnt := startMounted(t, "mnt")
	writeFile(t, filepath.Join(mnt, "kept.txt"), "kept\n")
	e.ok("capture", "s", "-m", "before the shutdown")
	busy := exec.Command("sleep", "60")
	busy.Dir = mnt
	require.NoError(t, busy.Start())
	t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })

	require.NoError(t, e.proc.Process.Signal(syscall.SIGTERM))
	require.Eventually(t, func() bool {
		return strings.Contains(e.logs.String(), "a second SIGINT or SIGTERM exits at once")
	}, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, e.proc.Process.Signal(syscall.SIGTERM))
	var err error
	select {
	case err = <-e.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the second SIGTERM did not end the daemon:\n%s", e.logs.String())
	}
	e.proc = nil
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "killed by the signal, not a clean exit")
	ws := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGTERM, "exit status %v", ws)

	_ = busy.Process.Kill()
	_ = busy.Wait()
	e.start()
	e.ok("mount", "s", mnt)
	require.Equal(t, "kept\n", readFile(t, filepath.Join(mnt, "kept.txt")))
}

// TestGrownFileSnapshotsPassFsck is the reproduction of a file grown past
// its stored short last chunk: `head -c 150000 /dev/urandom > M/f;
// homefs capture s; truncate -s 262144 M/f; homefs capture s; homefs
// fsck` reported "chunk 2: 18928 bytes, want 65536" (exit 5) and export
// stopped with "cas: corrupt chunk", while reads through the mount were
// right. Both snapshots and the head must pass fsck and export whole.
func TestGrownFileSnapshotsPassFsck(t *testing.T) {
	e, mnt := startMounted(t, "mnt")
	data := make([]byte, 150000)
	for i := range data {
		data[i] = byte(i*31 + i>>8 + 1)
	}
	f := filepath.Join(mnt, "f")
	require.NoError(t, os.WriteFile(f, data, 0o644)) // O_WRONLY|O_CREAT|O_TRUNC, as the shell's >
	first := strings.TrimSpace(e.ok("capture", "s"))
	require.NoError(t, os.Truncate(f, 262144))
	second := strings.TrimSpace(e.ok("capture", "s"))

	out := e.ok("fsck")
	require.NotContains(t, out, "want 65536")
	want := append(bytes.Clone(data), make([]byte, 262144-len(data))...)
	for snap, content := range map[string][]byte{first: data, second: want} {
		dir := filepath.Join(e.dir, "out-"+snap[:12])
		e.ok("export", snap, dir)
		got, err := os.ReadFile(filepath.Join(dir, "f"))
		require.NoError(t, err)
		require.True(t, bytes.Equal(content, got), "export of %s: %d bytes, want %d", snap[:12], len(got), len(content))
	}
	got, err := os.ReadFile(f)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "the mount holds %d bytes, want %d", len(got), len(want))
}
