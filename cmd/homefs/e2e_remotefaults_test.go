package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote/s3test"
)

// The remote's faults, end to end: a server that never answers, a frozen
// gateway, a gateway restarted during a push. Commands run under a limit
// far above any bounded failure, so a hang fails the test instead of
// stalling it; no test asserts how long anything took.

// hangLimit bounds a command that must end by itself.
const hangLimit = 3 * time.Minute

// quickRemote are serve flags with small remote bounds, so that a fault
// fails a request within seconds.
var quickRemote = []string{"--remote-idle-timeout", "500ms", "--remote-retry-total", "1s"}

// runBounded runs a homefs command that must end within hangLimit.
func (e *env) runBounded(args ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, homefsBin, args...)
	cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+e.root, "GORACE=atexit_sleep_ms=0")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		e.t.Fatalf("homefs %v hung: killed after %v\nstderr: %s", args, hangLimit, errb.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(e.t, err)
	}
	return result{out.String(), errb.String(), code}
}

func remoteCreds() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
}

// TestRemoteSilentServer: against an endpoint that accepts connections
// and never answers, push and pull fail with an error that says so,
// instead of hanging.
func TestRemoteSilentServer(t *testing.T) {
	needFUSE(t)
	endpoint := s3test.Silent(t)
	e := newEnv(t)
	e.daemonEnv = remoteCreds()
	e.start(quickRemote...)
	e.ok("remote", "add", "silent", "s3://bucket/p", "--endpoint", endpoint)
	mnt := e.mkdir("m")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)
	writeFile(t, filepath.Join(mnt, "workspace/a.txt"), "never pushed\n")
	e.ok("capture", "s")

	for _, args := range [][]string{{"push", "s"}, {"pull", "s"}, {"pull", "s", "--all"}, {"capture", "s", "--push"}} {
		r := e.runBounded(args...)
		require.Equal(t, exitOther, r.code, "homefs %v: %s", args, r.stderr)
		require.Contains(t, r.stderr, "the remote does not answer", "homefs %v", args)
	}
	require.Contains(t, e.ok("status", "--json"), "\"silent\"", "status answers with the remote down")
}

// TestRemoteFrozenGateway: host B reads a session lazily from a gateway
// that is then frozen (SIGSTOP). A read of a file not yet fetched fails
// with EIO, logged with the path, the remote and the object; host A's push
// fails with a clear error. Once the gateway continues, both succeed. A
// stopped gateway fails a lazy read with EIO too.
func TestRemoteFrozenGateway(t *testing.T) {
	needFUSE(t)
	srv := s3test.Start(t)
	url := "s3://" + srv.Bucket(t) + "/fleet"
	a, b := newEnv(t), newEnv(t)
	for _, e := range []*env{a, b} {
		e.daemonEnv = remoteCreds()
		e.start(quickRemote...)
		e.ok("remote", "add", "origin", url, "--endpoint", srv.Endpoint)
	}
	mntA := a.mkdir("a")
	a.ok("session", "create", "s")
	a.ok("mount", "s", mntA)
	big := randomText(1<<20, 7)
	writeFile(t, filepath.Join(mntA, "workspace/big.bin"), big)
	other := randomText(256<<10, 8)
	writeFile(t, filepath.Join(mntA, "workspace/other.bin"), other)
	a.ok("capture", "s", "--push")
	mntB := b.mkdir("b")
	b.ok("mount", "--remote", "origin", "s", mntB)

	srv.Freeze()
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			srv.Thaw()
		}
	})
	_, err := os.ReadFile(filepath.Join(mntB, "workspace/big.bin"))
	require.ErrorIs(t, err, syscall.EIO, "a lazy read from a frozen gateway")
	logs := b.logs.String()
	require.Contains(t, logs, "workspace/big.bin")
	require.Contains(t, logs, "remote origin: get fleet/chunks/")
	require.Contains(t, logs, "the remote does not answer")

	writeFile(t, filepath.Join(mntA, "workspace/second.txt"), "second turn\n")
	r := a.runBounded("capture", "s", "--push")
	require.Equal(t, exitOther, r.code, r.stderr)
	require.Contains(t, r.stderr, "the remote does not answer")

	srv.Thaw()
	thawed = true
	require.Equal(t, big, readFile(t, filepath.Join(mntB, "workspace/big.bin")))
	require.Contains(t, a.runBounded("push", "s").stdout, "pushed")

	// A gateway that is down refuses connections: the application sees
	// EIO, as from a disk, not ECONNREFUSED.
	srv.Stop()
	_, err = os.ReadFile(filepath.Join(mntB, "workspace/other.bin"))
	require.ErrorIs(t, err, syscall.EIO, "a lazy read from a stopped gateway")
	require.NoError(t, srv.Restart())
	require.Equal(t, other, readFile(t, filepath.Join(mntB, "workspace/other.bin")))
	b.ok("unmount", mntB)
}

// TestRemotePushSurvivesRestart: the gateway is killed during a push and
// started again on the same port 3 s later; the push, with the daemon's
// default bounds, completes by itself, and another host reads it back.
func TestRemotePushSurvivesRestart(t *testing.T) {
	needFUSE(t)
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	url := "s3://" + bucket + "/fleet"
	a, b := newEnv(t), newEnv(t)
	for _, e := range []*env{a, b} {
		e.daemonEnv = remoteCreds()
		e.start()
		e.ok("remote", "add", "origin", url, "--endpoint", srv.Endpoint)
	}
	mntA := a.mkdir("a")
	a.ok("session", "create", "s")
	a.ok("mount", "s", mntA)
	big := randomText(32<<20, 9) // 512 chunks: the push outlasts the kill
	writeFile(t, filepath.Join(mntA, "workspace/big.bin"), big)
	a.ok("capture", "s")

	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	push := exec.CommandContext(ctx, homefsBin, "push", "s")
	push.Env = append(os.Environ(), "HOMEFS_ROOT="+a.root)
	var stdout, stderr bytes.Buffer
	push.Stdout, push.Stderr = &stdout, &stderr
	require.NoError(t, push.Start())
	done := make(chan error, 1)
	go func() { done <- push.Wait() }()

	// Kill the gateway once the push has stored a few chunks.
	chunks := srv.ObjectPath(bucket, "fleet/chunks")
	for {
		ents, _ := os.ReadDir(chunks)
		if len(ents) >= 5 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("push ended before the gateway was killed: %v\n%s", err, stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	srv.Stop()
	select {
	case err := <-done:
		t.Fatalf("push ended as the gateway was killed, before any restart: %v\n%s", err, stderr.String())
	case <-time.After(3 * time.Second):
	}
	require.NoError(t, srv.Restart())
	err := <-done
	require.NoError(t, ctx.Err(), "push hung")
	require.NoError(t, err, "push across a 3 s gateway restart: %s", stderr.String())
	require.Contains(t, stdout.String(), "pushed")

	b.ok("pull", "s", "--all")
	mntB := b.mkdir("b")
	b.ok("mount", "--remote", "origin", "s", mntB)
	require.Equal(t, big, readFile(t, filepath.Join(mntB, "workspace/big.bin")))
	b.ok("unmount", mntB)
	require.Contains(t, b.ok("fsck"), "0 problems")
}

// TestRemotePullAllAfterLazyPull: a lazy pull (or mount --remote) and then
// pull --all in the same daemon lifetime fetches every chunk, so that the
// snapshot reads with the remote gone.
func TestRemotePullAllAfterLazyPull(t *testing.T) {
	needFUSE(t)
	srv := s3test.Start(t)
	url := "s3://" + srv.Bucket(t) + "/fleet"
	a, b := newEnv(t), newEnv(t)
	for _, e := range []*env{a, b} {
		e.daemonEnv = remoteCreds()
		e.start(quickRemote...)
		e.ok("remote", "add", "origin", url, "--endpoint", srv.Endpoint)
	}
	mntA := a.mkdir("a")
	a.ok("session", "create", "s")
	a.ok("mount", "s", mntA)
	big := randomText(1<<20, 11)
	writeFile(t, filepath.Join(mntA, "workspace/big.bin"), big)
	writeFile(t, filepath.Join(mntA, "workspace/small.txt"), "small\n")
	id := strings.TrimSpace(a.ok("capture", "s", "--push"))

	var lazy, all api.PullResult
	require.NoError(t, json.Unmarshal([]byte(b.ok("pull", "s", "--json")), &lazy))
	require.Less(t, lazy.FetchedBytes, int64(len(big)/2), "a lazy pull fetches no file chunk")
	mntB := b.mkdir("b")
	b.ok("mount", "--remote", "origin", "s", mntB)
	require.Equal(t, "small\n", readFile(t, filepath.Join(mntB, "workspace/small.txt")))
	b.ok("unmount", mntB)
	require.NoError(t, json.Unmarshal([]byte(b.ok("pull", "s", "--all", "--json")), &all))
	require.GreaterOrEqual(t, all.FetchedBytes, int64(len(big)), "pull --all after a lazy pull")

	srv.Stop()
	b.ok("session", "create", "s")
	b.ok("restore", "s", id)
	mntB2 := b.mkdir("b2")
	b.ok("mount", "s", mntB2)
	require.Equal(t, big, readFile(t, filepath.Join(mntB2, "workspace/big.bin")), "read with the remote gone")
	b.ok("unmount", mntB2)
	require.Contains(t, b.ok("fsck"), "0 problems")
}

// TestServeRemoteFlags: the remote bounds must be positive; a zero retry
// budget is allowed (no retries).
func TestServeRemoteFlags(t *testing.T) {
	e := newEnv(t)
	for _, flag := range []string{"--remote-connect-timeout", "--remote-idle-timeout", "--remote-request-timeout"} {
		e.fails(exitUsage, flag+" 0s: want a positive duration", "serve", flag, "0s")
	}
	e.fails(exitUsage, "--remote-retry-total -1s: want a positive duration", "serve", "--remote-retry-total", "-1s")
}
