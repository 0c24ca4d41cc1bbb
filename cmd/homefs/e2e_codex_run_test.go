package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/internal/testkit/codextest"
	"github.com/homefs/homefs/internal/testkit/mockresponses"
)

// agentRun runs the real Codex CLI through homefs run as the unprivileged
// agent user, against the mock model at url, and returns the session id.
type agentRun struct {
	t    *testing.T
	home string // the agent user's HOME, writable by it
}

func newAgentRun(t *testing.T) *agentRun {
	home := filepath.Join(t.TempDir(), "agent-home")
	require.NoError(t, os.MkdirAll(home, 0o777))
	require.NoError(t, os.Chmod(home, 0o777))
	openUp(t, home)
	return &agentRun{t: t, home: home}
}

// codex runs `codex exec --skip-git-repo-check ARGS…` in session.
func (a *agentRun) codex(e *env, session string, args ...string) string {
	a.t.Helper()
	argv := append([]string{"run", session, "--user", "nobody",
		"--env", "MOCK_API_KEY=test", "--env", "NO_COLOR=1", "--env", "HOME=" + a.home,
		"--", "codex", "exec", "--skip-git-repo-check"}, args...)
	r := e.run(argv...)
	require.Equal(a.t, 0, r.code, "codex %v:\n%s%s", args, r.stdout, r.stderr)
	id, ok := codextest.SessionID([]byte(r.stdout + r.stderr))
	require.True(a.t, ok, "no session id from codex %v:\n%s%s", args, r.stdout, r.stderr)
	return id
}

// moveToSecondHost pushes session from e to a bucket of srv, starts a
// second daemon (another root, another daemon mount) with creds, pulls
// the session there and creates it from snapshot snap, owned by nobody.
func moveToSecondHost(t *testing.T, e *env, srv *s3test.Server, creds []string, session, snap string) *env {
	t.Helper()
	url := "s3://" + srv.Bucket(t) + "/fleet"
	b := newEnv(t)
	b.daemonEnv = creds
	b.start()
	for _, h := range []*env{e, b} {
		h.ok("remote", "add", "origin", url, "--endpoint", srv.Endpoint)
	}
	e.ok("push", session, "origin")
	b.ok("pull", session, "origin", "--all")
	b.ok("session", "create", session, "--from", snap, "--owner", "nobody")
	return b
}

// sessionText is every rollout of session's Codex home, concatenated.
func sessionText(t *testing.T, e *env, session string) string {
	t.Helper()
	r := e.run("run", session, "--", "sh", "-c", `find "$CODEX_HOME/sessions" -name '*.jsonl' -exec cat {} +`)
	require.Equal(t, 0, r.code, r.stderr)
	return r.stdout
}

// TestRunCodex: the real Codex CLI, run as an unprivileged user through
// homefs run, with its home at any subtree: a turn in S1, capture, fork
// S2 and resume there, Codex's own fork inside S2, bind into S3 and
// resume, a move to a second daemon through a real S3 server (first
// variant only), and a restore of S1 to an earlier snapshot while mounted;
// S1's files stay byte-identical through everything done elsewhere.
func TestRunCodex(t *testing.T) {
	codextest.Require(t)
	mock, err := mockresponses.Start()
	require.NoError(t, err)
	t.Cleanup(func() { mock.Close() })
	for i, sub := range []string{"codex-home", "home", ".codex"} {
		t.Run(strings.TrimPrefix(sub, "."), func(t *testing.T) { testRunCodex(t, mock.URL, sub, i == 0) })
	}
}

func testRunCodex(t *testing.T, mockURL, sub string, move bool) {
	e := newEnv(t)
	var srv *s3test.Server
	var creds []string
	if move {
		srv = s3test.Start(t)
		creds = []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
		e.daemonEnv = creds
	}
	e.start()
	canon := filepath.Join(e.dir, "canon")
	require.NoError(t, os.MkdirAll(canon, 0o755))
	openUp(t, canon)
	layout := []string{"--owner", "nobody", "--home", "codex=" + sub, "--home-at", "codex=" + canon + "/agent/.codex", "--workspace-at", canon + "/repo"}
	create := func(e *env, name string) {
		e.ok(append([]string{"session", "create", name}, layout...)...)
		r := e.runStdin([]byte(codextest.Config(mockURL)), "run", name, "--", "sh", "-c", `cat > "$CODEX_HOME/config.toml"`)
		require.Equal(t, 0, r.code, r.stderr)
	}
	agent := newAgentRun(t)

	create(e, "s1")
	id := agent.codex(e, "s1", "first turn in S1")
	snap1 := strings.TrimSpace(e.ok("capture", "s1", "--handle", "codex="+id))
	require.Equal(t, id, agent.codex(e, "s1", "resume", id, "second turn in S1"))
	snap2 := strings.TrimSpace(e.ok("capture", "s1", "--handle", "codex="+id))

	// S1 stays mounted on the host; every run of it shares that mount.
	hostS1 := e.mkdir("s1")
	e.ok("mount", "s1", hostS1)
	before := codextest.HashTree(t, hostS1)
	require.NotEmpty(t, before)

	// Fork S2 and resume there; Codex's own fork inside S2.
	e.ok("fork", "s1@"+snap2, "s2")
	require.Equal(t, id, agent.codex(e, "s2", "resume", id, "turn resumed in S2"))
	child := agent.codex(e, "s2", "fork", id, "turn in the native fork")
	require.NotEqual(t, id, child)
	require.Equal(t, child, agent.codex(e, "s2", "resume", child, "turn resumed in the fork"))
	s2 := sessionText(t, e, "s2")
	require.Contains(t, s2, "turn resumed in S2")
	require.Contains(t, s2, "turn resumed in the fork")

	// Bind the provider session into S3 and resume it there.
	create(e, "s3")
	e.ok("bind", "--provider", "codex", "--id", id, "s1", "s3")
	require.Equal(t, id, agent.codex(e, "s3", "resume", id, "turn resumed in S3"))
	require.Contains(t, sessionText(t, e, "s3"), "turn resumed in S3")

	if move {
		// Push S1 and resume it on a second daemon (another root, another
		// daemon mount), at the same canonical paths.
		b := moveToSecondHost(t, e, srv, creds, "s1", snap2)
		require.Equal(t, id, agent.codex(b, "s1", "resume", id, "turn resumed on host B"))
		require.Contains(t, sessionText(t, b, "s1"), "turn resumed on host B")
	}

	after := codextest.HashTree(t, hostS1)
	require.Equal(t, before, after, "S1's files changed through work in S2, S3 or on another host")
	require.NotContains(t, sessionText(t, e, "s1"), "turn resumed in")

	// Restore S1 to its first snapshot while mounted, and resume.
	e.ok("restore", "s1", snap1)
	require.Equal(t, id, agent.codex(e, "s1", "resume", id, "turn after the restore"))
	s1 := sessionText(t, e, "s1")
	require.Contains(t, s1, "first turn in S1")
	require.Contains(t, s1, "turn after the restore")
	require.NotContains(t, s1, "second turn in S1", fmt.Sprintf("restore to %s", snap1))
	require.Contains(t, e.ok("fsck"), "0 problems")
}
