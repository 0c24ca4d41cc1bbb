package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/internal/testkit/claudetest"
	"github.com/homefs/homefs/internal/testkit/codextest"
	"github.com/homefs/homefs/internal/testkit/mockmessages"
	"github.com/homefs/homefs/internal/testkit/pitest"
)

// agentCLI is what the homefs run scenario needs to know of a CLI that
// keys its sessions on the workspace's absolute path (Claude Code, Pi).
type agentCLI struct {
	provider string
	homeVar  string            // the variable homefs run points at the home
	config   map[string][]byte // files written into each session's home
	command  func(args ...string) []string
	environ  []string
	parse    func(stdout, stderr []byte) (id string, err error)
	resume   func(id, prompt string) []string
	fork     func(id, prompt string) []string
	// transcript is the shell glob, below the home, of session id's file.
	transcript func(id string) string
	// turns checks that a transcript is session id's, with cwd as its
	// workspace, and returns the user prompts in it.
	turns func(b []byte, id, cwd string) ([]string, error)
}

var claudeCLI = agentCLI{
	provider: "claude",
	homeVar:  "CLAUDE_CONFIG_DIR",
	command:  claudetest.Command,
	environ:  claudetest.Environ(),
	parse: func(stdout, stderr []byte) (string, error) {
		r, err := claudetest.ParseResult(stdout, stderr)
		return r.SessionID, err
	},
	resume:     func(id, prompt string) []string { return []string{"--resume", id, prompt} },
	fork:       func(id, prompt string) []string { return []string{"--resume", id, "--fork-session", prompt} },
	transcript: func(id string) string { return "projects/*/" + id + ".jsonl" },
	turns: func(b []byte, id, cwd string) ([]string, error) {
		recs, err := claudetest.ParseTranscript(b)
		if err != nil {
			return nil, err
		}
		var prompts []string
		for _, r := range recs {
			if sid, ok := r["sessionId"]; ok && sid != id {
				return nil, fmt.Errorf("%s record of session %v in %s's transcript", r.Type(), sid, id)
			}
			if r.Type() == "user" {
				if r["cwd"] != cwd {
					return nil, fmt.Errorf("user record with cwd %v, want %s", r["cwd"], cwd)
				}
				prompts = append(prompts, r.Text())
			}
		}
		return prompts, nil
	},
}

var piCLI = agentCLI{
	provider: "pi",
	homeVar:  "PI_CODING_AGENT_DIR",
	command:  pitest.Command,
	environ:  pitest.Environ(),
	parse: func(stdout, stderr []byte) (string, error) {
		r, err := pitest.ParseResult(stdout, stderr)
		return r.SessionID, err
	},
	resume:     func(id, prompt string) []string { return []string{"--session", id, prompt} },
	fork:       func(id, prompt string) []string { return []string{"--fork", id, prompt} },
	transcript: func(id string) string { return "sessions/*/*_" + id + ".jsonl" },
	turns: func(b []byte, id, cwd string) ([]string, error) {
		h, entries, err := pitest.ParseSession(b)
		if err != nil {
			return nil, err
		}
		if h.ID != id || h.Cwd != cwd {
			return nil, fmt.Errorf("header %+v, want id %s and cwd %s", h, id, cwd)
		}
		var prompts []string
		for _, e := range entries {
			if e.Role() == "user" {
				prompts = append(prompts, e.Text())
			}
		}
		return prompts, nil
	},
}

// turn runs the CLI with args in session through homefs run, as nobody,
// and returns the provider session id the turn went to.
func (c agentCLI) turn(a *agentRun, e *env, session string, args ...string) string {
	a.t.Helper()
	argv := []string{"run", session, "--user", "nobody", "--env", "HOME=" + a.home}
	for _, kv := range c.environ {
		argv = append(argv, "--env", kv)
	}
	argv = append(append(argv, "--"), c.command(args...)...)
	r := e.runStdin([]byte{}, argv...)
	require.Equal(a.t, 0, r.code, "%s %v:\n%s%s", c.provider, args, r.stdout, r.stderr)
	id, err := c.parse([]byte(r.stdout), []byte(r.stderr))
	require.NoError(a.t, err, "%s %v:\n%s%s", c.provider, args, r.stdout, r.stderr)
	return id
}

// writeConfig writes the CLI's configuration into session's home through
// homefs run, as root.
func (c agentCLI) writeConfig(t *testing.T, e *env, session string) {
	t.Helper()
	for name, b := range c.config {
		r := e.runStdin(b, "run", session, "--", "sh", "-c", fmt.Sprintf(`cat > "$%s/%s"`, c.homeVar, name))
		require.Equal(t, 0, r.code, r.stderr)
	}
}

// prompts returns the user prompts of provider session id's one file in
// session, read through homefs run; cwd is the workspace it must record.
func (c agentCLI) prompts(t *testing.T, e *env, session, id, cwd string) []string {
	t.Helper()
	script := fmt.Sprintf(`set -- "$%s"/%s; [ $# = 1 ] && [ -f "$1" ] && cat "$1"`, c.homeVar, c.transcript(id))
	r := e.run("run", session, "--", "sh", "-c", script)
	require.Equal(t, 0, r.code, "no single file of %s session %s in %s: %s", c.provider, id, session, r.stderr)
	p, err := c.turns([]byte(r.stdout), id, cwd)
	require.NoError(t, err, "%s session %s in %s", c.provider, id, session)
	return p
}

// hasTurn checks that session's file of provider session id holds a turn
// whose prompt contains each of want, and none containing each of not.
func (c agentCLI) hasTurn(t *testing.T, e *env, session, id, cwd string, want []string, not ...string) {
	t.Helper()
	p := c.prompts(t, e, session, id, cwd)
	all := strings.Join(p, "\n---\n")
	for _, w := range want {
		require.Contains(t, all, w, "%s session %s in %s", c.provider, id, session)
	}
	for _, n := range not {
		require.NotContains(t, all, n, "%s session %s in %s", c.provider, id, session)
	}
}

// TestRunClaude: the real Claude Code CLI, run as an unprivileged user
// through homefs run, in the scenario of TestRunCodex.
func TestRunClaude(t *testing.T) {
	claudetest.Require(t)
	testRunAgent(t, claudeCLI, func(url string) map[string][]byte {
		return map[string][]byte{"settings.json": claudetest.Settings(url)}
	})
}

// TestRunPi: the real Pi CLI, run as an unprivileged user through homefs
// run, in the scenario of TestRunCodex.
func TestRunPi(t *testing.T) {
	pitest.Require(t)
	testRunAgent(t, piCLI, func(url string) map[string][]byte {
		return map[string][]byte{"models.json": pitest.ModelsJSON(url), "settings.json": pitest.SettingsJSON()}
	})
}

// testRunAgent: a turn in S1 (with a tool call in the workspace), capture,
// fork S2 and resume there, the CLI's own fork inside S2, bind into S3 and
// resume, a move to a second daemon through a real S3 server resumed
// there, and a restore of S1 to an earlier snapshot while mounted, resumed;
// every session shows the home and the workspace at the same canonical
// paths, and S1's files stay byte-identical through everything done
// elsewhere.
func testRunAgent(t *testing.T, c agentCLI, config func(url string) map[string][]byte) {
	mock, err := mockmessages.Start()
	require.NoError(t, err)
	t.Cleanup(func() { mock.Close() })
	c.config = config(mock.URL)

	e := newEnv(t)
	srv := s3test.Start(t)
	creds := []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
	e.daemonEnv = creds
	e.start()
	canon := filepath.Join(e.dir, "canon")
	require.NoError(t, os.MkdirAll(canon, 0o755))
	openUp(t, canon)
	ws := canon + "/repo"
	layout := []string{"--owner", "nobody", "--home", c.provider + "=" + c.provider,
		"--home-at", c.provider + "=" + canon + "/agent/." + c.provider, "--workspace-at", ws}
	create := func(e *env, name string) {
		e.ok(append([]string{"session", "create", name}, layout...)...)
		c.writeConfig(t, e, name)
	}
	agent := newAgentRun(t)

	create(e, "s1")
	id := c.turn(agent, e, "s1", "first turn in S1\n"+mockmessages.BashDirective+"pwd > where.txt")
	r := e.run("run", "s1", "--", "cat", "where.txt")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, ws+"\n", r.stdout, "the tool ran in the canonical workspace")
	snap1 := strings.TrimSpace(e.ok("capture", "s1", "--handle", c.provider+"="+id))
	require.Equal(t, id, c.turn(agent, e, "s1", c.resume(id, "second turn in S1")...))
	c.hasTurn(t, e, "s1", id, ws, []string{"first turn in S1", "second turn in S1"})
	snap2 := strings.TrimSpace(e.ok("capture", "s1", "--handle", c.provider+"="+id))

	// S1 stays mounted on the host; every run of it shares that mount.
	hostS1 := e.mkdir("s1")
	e.ok("mount", "s1", hostS1)
	before := codextest.HashTree(t, hostS1)
	require.NotEmpty(t, before)

	// Fork S2 and resume there; the CLI's own fork inside S2.
	e.ok("fork", "s1@"+snap2, "s2")
	require.Equal(t, id, c.turn(agent, e, "s2", c.resume(id, "turn resumed in S2")...))
	c.hasTurn(t, e, "s2", id, ws, []string{"second turn in S1", "turn resumed in S2"})
	child := c.turn(agent, e, "s2", c.fork(id, "turn in the native fork")...)
	require.NotEqual(t, id, child)
	require.Equal(t, child, c.turn(agent, e, "s2", c.resume(child, "turn resumed in the fork")...))
	c.hasTurn(t, e, "s2", child, ws, []string{"turn resumed in S2", "turn in the native fork", "turn resumed in the fork"})
	c.hasTurn(t, e, "s2", id, ws, nil, "native fork", "turn resumed in the fork")

	// Bind the provider session into S3 and resume it there.
	create(e, "s3")
	e.ok("bind", "--provider", c.provider, "--id", id, "s1", "s3")
	require.Equal(t, id, c.turn(agent, e, "s3", c.resume(id, "turn resumed in S3")...))
	c.hasTurn(t, e, "s3", id, ws, []string{"second turn in S1", "turn resumed in S3"}, "turn resumed in S2")

	// Push S1 and resume it on a second daemon (another root, another
	// daemon mount), at the same canonical paths; the configuration
	// comes with the snapshot.
	b := moveToSecondHost(t, e, srv, creds, "s1", snap2)
	require.Equal(t, id, c.turn(agent, b, "s1", c.resume(id, "turn resumed on host B")...))
	c.hasTurn(t, b, "s1", id, ws, []string{"second turn in S1", "turn resumed on host B"})

	after := codextest.HashTree(t, hostS1)
	require.Equal(t, before, after, "S1's files changed through work in S2, S3 or on another host")
	c.hasTurn(t, e, "s1", id, ws, []string{"second turn in S1"}, "turn resumed in", "native fork")

	// Restore S1 to its first snapshot while mounted, and resume.
	e.ok("restore", "s1", snap1)
	require.Equal(t, id, c.turn(agent, e, "s1", c.resume(id, "turn after the restore")...))
	c.hasTurn(t, e, "s1", id, ws, []string{"first turn in S1", "turn after the restore"}, "second turn in S1")
	require.Contains(t, e.ok("fsck"), "0 problems")
}

// TestKeyedProvidersNeedCanonicalWorkspace: Claude Code and Pi key their
// sessions on the workspace's absolute path, so a bind between sessions
// whose canonical workspace paths differ (or are missing) is refused, and
// a fork of a session with such a home but no canonical workspace path
// warns that only homefs run can resume it once it has one.
func TestKeyedProvidersNeedCanonicalWorkspace(t *testing.T) {
	e := newEnv(t)
	e.start()
	canon := e.mkdir("canon")
	homes := func(name string, extra ...string) {
		e.ok(append([]string{"session", "create", name, "--home", "claude=claude", "--home", "pi=pi",
			"--home-at", "claude=" + canon + "/" + name + "/.claude", "--home-at", "pi=" + canon + "/" + name + "/.pi"}, extra...)...)
		r := e.runStdin([]byte("{}\n"), "run", name, "--", "sh", "-c",
			`mkdir -p "$CLAUDE_CONFIG_DIR/projects" "$PI_CODING_AGENT_DIR/sessions" && cat > "$CLAUDE_CONFIG_DIR/settings.json" && echo '{}' > "$PI_CODING_AGENT_DIR/models.json"`)
		require.Equal(t, 0, r.code, r.stderr)
	}
	homes("a", "--workspace-at", canon+"/ws-a")
	homes("b", "--workspace-at", canon+"/ws-b")
	homes("none")
	id := "00000000-0000-4000-8000-000000000000"
	for _, p := range []string{"claude", "pi"} {
		for _, pair := range [][2]string{{"a", "b"}, {"a", "none"}, {"none", "a"}, {"none", "none"}} {
			r := e.fails(exitUsage, "homefs run", "bind", "--provider", p, "--id", id, pair[0], pair[1])
			require.Contains(t, r.stderr, "canonical workspace path", "bind %s %v", p, pair)
		}
	}

	r := e.run("fork", "none", "none-2")
	require.Equal(t, 0, r.code, r.stderr)
	for _, p := range []string{"claude", "pi"} {
		require.Regexp(t, "homefs: warning: [^\n]*"+p+" home", r.stderr)
	}
	r = e.run("fork", "a", "a-2")
	require.Equal(t, 0, r.code, r.stderr)
	require.NotContains(t, r.stderr, "warning", "a session with a canonical workspace path")
}
