// Package claudetest runs the real Claude Code CLI offline in tests: it
// points Claude Code at a mock of the Anthropic Messages API
// (internal/mockmessages) through a settings.json inside the config dir
// (CLAUDE_CONFIG_DIR), so a config dir on a homefs mount carries its own
// configuration, and runs `claude -p` in any workspace, as any user.
//
// A session is one transcript, projects/<cwd with / as ->/<id>.jsonl below
// the config dir; SessionFile finds it by content, not by that name.
package claudetest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/homefs/homefs/internal/testkit/testuser"
)

// Version is the Claude Code release .ci/run installs and these helpers
// were written against.
const Version = "2.1.332"

// Require skips a test that needs the real Claude Code CLI when it is
// missing, except in CI (CI=true), where .ci/run installs it and the test
// must run: there it fails instead.
func Require(t testing.TB) {
	t.Helper()
	out, err := exec.Command("claude", "--version").Output()
	if err == nil {
		if !strings.Contains(string(out), Version) {
			t.Logf("claude %s, not %s: results may differ", bytes.TrimSpace(out), Version)
		}
		return
	}
	missing := "Claude Code not installed (npm install -g @anthropic-ai/claude-code@" + Version + ")"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: CI must run the real Claude Code tests", missing)
	}
	t.Skip(missing)
}

// quiet turns off every call Claude Code makes besides the model's:
// telemetry, error reports, the auto-updater and other "nonessential"
// traffic (feature flags, release notes). They go in the process's
// environment too, so no run reaches the Internet even when the settings
// cannot be read.
var quiet = map[string]string{
	"DISABLE_TELEMETRY":                        "1",
	"DISABLE_ERROR_REPORTING":                  "1",
	"DISABLE_AUTOUPDATER":                      "1",
	"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}

// Settings is a settings.json pointing Claude Code at the mock Messages API
// at url (ANTHROPIC_BASE_URL, without /v1) with a dummy API key, with the
// network switched off otherwise, and with the tools the mock calls allowed:
// print mode cannot ask, and --dangerously-skip-permissions is refused to
// root.
func Settings(url string) []byte {
	env := map[string]string{"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "test"}
	for k, v := range quiet {
		env[k] = v
	}
	b, err := json.MarshalIndent(map[string]any{
		"env":         env,
		"permissions": map[string]any{"allow": []string{"Bash", "Write", "Edit", "Read"}},
	}, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// Env is where and as whom Claude Code runs.
type Env struct {
	// ConfigDir is CLAUDE_CONFIG_DIR: settings, .claude.json, transcripts.
	ConfigDir string
	// Home is HOME; when empty, a new directory Cred owns.
	Home string
	// Cred runs Claude Code as another user; nil runs it as the test's.
	Cred *syscall.Credential
}

// Result is one run's outcome.
type Result struct {
	SessionID string // the session the turn went to
	Text      string // the final assistant text
	Stdout    []byte // the JSON result
	Stderr    []byte
}

// WriteConfig writes Settings(url) to ConfigDir/settings.json, creating
// ConfigDir; both belong to Cred.
func (e *Env) WriteConfig(t testing.TB, url string) {
	t.Helper()
	if err := os.MkdirAll(e.ConfigDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.ConfigDir, "settings.json"), Settings(url), 0o644); err != nil {
		t.Fatal(err)
	}
	testuser.Chown(t, e.ConfigDir, e.Cred)
}

// Turn starts a new session in cwd with prompt.
func (e *Env) Turn(t testing.TB, cwd, prompt string) Result {
	t.Helper()
	return e.must(t, cwd, prompt)
}

// Resume runs a turn in session id; Claude Code appends it to the
// session's transcript.
func (e *Env) Resume(t testing.TB, cwd, id, prompt string) Result {
	t.Helper()
	return e.must(t, cwd, "--resume", id, prompt)
}

// Fork runs a turn in a new session forked from id (--fork-session): a new
// transcript that starts with a copy of id's conversation.
func (e *Env) Fork(t testing.TB, cwd, id, prompt string) Result {
	t.Helper()
	return e.must(t, cwd, "--resume", id, "--fork-session", prompt)
}

func (e *Env) must(t testing.TB, cwd string, args ...string) Result {
	t.Helper()
	r, err := e.Run(t, cwd, args...)
	if err != nil {
		t.Fatalf("claude %s: %v\n%s%s", strings.Join(args, " "), err, r.Stdout, r.Stderr)
	}
	return r
}

// Run runs `claude -p --output-format json ARGS…` in cwd and returns its
// result, with an error when it exits non-zero or reports one.
func (e *Env) Run(t testing.TB, cwd string, args ...string) (Result, error) {
	t.Helper()
	if e.Home == "" {
		e.Home = testuser.Dir(t, e.Cred)
	}
	// Nothing of a developer's own key, config dir or base URL.
	env := append(testuser.Environ("ANTHROPIC_", "CLAUDE_"), "HOME="+e.Home, "CLAUDE_CONFIG_DIR="+e.ConfigDir)
	stdout, stderr, err := testuser.Run(e.Cred, cwd, append(env, Environ()...), Command(args...))
	if err != nil {
		return Result{Stdout: stdout, Stderr: stderr}, err
	}
	return ParseResult(stdout, stderr)
}

// Command is the argv of one print-mode turn, `claude -p --output-format
// json ARGS…`, for running Claude Code some other way than Run (homefs
// run); give it Environ, HOME and CLAUDE_CONFIG_DIR, an empty stdin, and
// read its output with ParseResult.
func Command(args ...string) []string {
	return append([]string{"claude", "-p", "--output-format", "json"}, args...)
}

// Environ is what a run of Claude Code needs in its environment besides
// HOME and CLAUDE_CONFIG_DIR: no colours, no network calls but the
// model's. KEY=VALUE, sorted.
func Environ() []string {
	env := []string{"NO_COLOR=1"}
	for k, v := range quiet {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// ParseResult reads the JSON result of a turn run with Command; the error
// says when there is none or Claude Code reports an error.
func ParseResult(stdout, stderr []byte) (Result, error) {
	r := Result{Stdout: stdout, Stderr: stderr}
	var out struct {
		SessionID string `json:"session_id"`
		Result    string `json:"result"`
		IsError   bool   `json:"is_error"`
	}
	if err := json.Unmarshal(r.Stdout, &out); err != nil {
		return r, fmt.Errorf("result: %w", err)
	}
	r.SessionID, r.Text = out.SessionID, out.Result
	if out.IsError {
		return r, errors.New("claude reported an error")
	}
	return r, nil
}

// SessionFile returns the transcript of session id below configDir: the
// .jsonl file whose records carry that sessionId (a fork's copies of its
// parent's records carry the fork's).
func SessionFile(t testing.TB, configDir, id string) string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(configDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !strings.HasSuffix(p, ".jsonl") {
			return err
		}
		if sid, err := firstSessionID(p); err != nil {
			return err
		} else if sid == id {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 {
		t.Fatalf("transcripts of session %s below %s: %q", id, configDir, found)
	}
	return found[0]
}

func firstSessionID(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	for sc.Scan() {
		var rec struct {
			SessionID string `json:"sessionId"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.SessionID != "" {
			return rec.SessionID, nil
		}
	}
	return "", sc.Err()
}

// Record is one line of a transcript.
type Record map[string]any

// Type is the record's type: "user", "assistant", "attachment", ….
func (r Record) Type() string { s, _ := r["type"].(string); return s }

// UUID is the record's place in the conversation chain; "" for bookkeeping
// records (queue operations, API request shapes, costs).
func (r Record) UUID() string { s, _ := r["uuid"].(string); return s }

// Text is the text of a user or assistant message.
func (r Record) Text() string {
	msg, _ := r["message"].(map[string]any)
	switch c := msg["content"].(type) {
	case string:
		return c
	case []any:
		var parts []string
		for _, b := range c {
			if block, _ := b.(map[string]any); block["type"] == "text" {
				s, _ := block["text"].(string)
				parts = append(parts, s)
			}
		}
		return strings.Join(parts, "\n")
	}
	return ""
}

// ReadTranscript returns a transcript's records.
func ReadTranscript(t testing.TB, path string) []Record {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := ParseTranscript(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return recs
}

// ParseTranscript returns the records of a transcript's contents.
func ParseTranscript(b []byte) ([]Record, error) {
	var recs []Record
	for i, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		recs = append(recs, r)
	}
	return recs, nil
}
