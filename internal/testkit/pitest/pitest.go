// Package pitest runs the real Pi coding agent offline in tests: a custom
// provider in the agent dir's models.json (PI_CODING_AGENT_DIR) points Pi
// at a mock of the Anthropic Messages API (internal/mockmessages), so an
// agent dir on a homefs mount carries its own configuration, and `pi -p`
// runs in any workspace, as any user.
//
// A session is one file, sessions/--<cwd with / as ->--/<ts>_<id>.jsonl
// below the agent dir, whose first line is a header naming the id;
// SessionFile finds it by that header, not by its name.
package pitest

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
	"strings"
	"syscall"
	"testing"

	"github.com/homefs/homefs/internal/testkit/testuser"
)

// Version is the Pi release .ci/run installs and these helpers were
// written against.
const Version = "0.73.1"

// Provider and Model name the mock in models.json and settings.json.
const (
	Provider = "mock"
	Model    = "mock-model"
)

// Require skips a test that needs the real Pi CLI when it is missing,
// except in CI (CI=true), where .ci/run installs it and the test must run:
// there it fails instead.
func Require(t testing.TB) {
	t.Helper()
	out, err := exec.Command("pi", "--version").CombinedOutput() // it prints to stderr
	if err == nil {
		if strings.TrimSpace(string(out)) != Version {
			t.Logf("pi %s, not %s: results may differ", bytes.TrimSpace(out), Version)
		}
		return
	}
	missing := "Pi not installed (npm install -g @mariozechner/pi-coding-agent@" + Version + ")"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: CI must run the real Pi tests", missing)
	}
	t.Skip(missing)
}

// quiet turns off Pi's startup network calls (version and package update
// checks, install telemetry).
var quiet = []string{"PI_OFFLINE=1", "PI_SKIP_VERSION_CHECK=1", "PI_TELEMETRY=0"}

// ModelsJSON is a models.json with one provider, Provider, speaking the
// Anthropic Messages API at url with a dummy key, and one model, Model.
func ModelsJSON(url string) []byte {
	return marshal(map[string]any{"providers": map[string]any{Provider: map[string]any{
		"baseUrl": url, "api": "anthropic-messages", "apiKey": "test",
		"models": []any{map[string]any{
			"id": Model, "name": "Mock", "reasoning": false, "input": []string{"text"},
			"contextWindow": 200000, "maxTokens": 8192,
			"cost": map[string]any{"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
		}},
	}}})
}

// SettingsJSON is a settings.json making the mock the default model, with
// install telemetry off.
func SettingsJSON() []byte {
	return marshal(map[string]any{
		"defaultProvider": Provider, "defaultModel": Model,
		"enableInstallTelemetry": false, "quietStartup": true,
	})
}

func marshal(v any) []byte {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// Env is where and as whom Pi runs.
type Env struct {
	// AgentDir is PI_CODING_AGENT_DIR: models, settings, auth, sessions.
	AgentDir string
	// Home is HOME; when empty, a new directory Cred owns.
	Home string
	// Cred runs Pi as another user; nil runs it as the test's.
	Cred *syscall.Credential
}

// Result is one run's outcome.
type Result struct {
	SessionID string // the session the turn went to
	Text      string // the final assistant text
	Stdout    []byte // the JSON event stream
	Stderr    []byte
}

// WriteConfig writes ModelsJSON(url) and SettingsJSON into AgentDir,
// creating it; all belong to Cred.
func (e *Env) WriteConfig(t testing.TB, url string) {
	t.Helper()
	if err := os.MkdirAll(e.AgentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"models.json": ModelsJSON(url), "settings.json": SettingsJSON()} {
		if err := os.WriteFile(filepath.Join(e.AgentDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testuser.Chown(t, e.AgentDir, e.Cred)
}

// Turn starts a new session in cwd with prompt.
func (e *Env) Turn(t testing.TB, cwd, prompt string) Result {
	t.Helper()
	return e.must(t, cwd, prompt)
}

// Resume runs a turn in session id (a session file's path works too); Pi
// appends it to the session's file.
func (e *Env) Resume(t testing.TB, cwd, id, prompt string) Result {
	t.Helper()
	return e.must(t, cwd, "--session", id, prompt)
}

// Fork runs a turn in a new session forked from id (--fork): a new file
// with a copy of every entry, whose header names the parent's file.
func (e *Env) Fork(t testing.TB, cwd, id, prompt string) Result {
	t.Helper()
	return e.must(t, cwd, "--fork", id, prompt)
}

func (e *Env) must(t testing.TB, cwd string, args ...string) Result {
	t.Helper()
	r, err := e.Run(t, cwd, args...)
	if err != nil {
		t.Fatalf("pi %s: %v\n%s%s", strings.Join(args, " "), err, r.Stdout, r.Stderr)
	}
	return r
}

// Run runs `pi -p --mode json ARGS…` in cwd and returns its result, with an
// error when it exits non-zero, prints no session, or the model call failed.
func (e *Env) Run(t testing.TB, cwd string, args ...string) (Result, error) {
	t.Helper()
	if e.Home == "" {
		e.Home = testuser.Dir(t, e.Cred)
	}
	// Nothing of a developer's agent dir, session dir or keys.
	env := append(testuser.Environ("PI_", "ANTHROPIC_"), "HOME="+e.Home, "PI_CODING_AGENT_DIR="+e.AgentDir)
	stdout, stderr, err := testuser.Run(e.Cred, cwd, append(env, Environ()...), Command(args...))
	if err != nil {
		return Result{Stdout: stdout, Stderr: stderr}, err
	}
	return ParseResult(stdout, stderr)
}

// Command is the argv of one print-mode turn, `pi -p --mode json ARGS…`,
// for running Pi some other way than Run (homefs run); give it Environ,
// HOME and PI_CODING_AGENT_DIR, an empty stdin, and read its output with
// ParseResult.
func Command(args ...string) []string {
	return append([]string{"pi", "-p", "--mode", "json"}, args...)
}

// Environ is what a run of Pi needs in its environment besides HOME and
// PI_CODING_AGENT_DIR: no colours, no network calls but the model's.
func Environ() []string {
	return append([]string{"NO_COLOR=1"}, quiet...)
}

// ParseResult reads the JSON event stream of a turn run with Command; the
// error says when it names no session or the model call failed.
func ParseResult(stdout, stderr []byte) (Result, error) {
	r := Result{Stdout: stdout, Stderr: stderr}
	for _, line := range bytes.Split(r.Stdout, []byte("\n")) {
		var ev struct {
			Type    string `json:"type"`
			ID      string `json:"id"`
			Message struct {
				Role         string            `json:"role"`
				Content      []json.RawMessage `json:"content"`
				StopReason   string            `json:"stopReason"`
				ErrorMessage string            `json:"errorMessage"`
			} `json:"message"`
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch {
		case ev.Type == "session" && r.SessionID == "":
			r.SessionID = ev.ID
		case ev.Type == "message_end" && ev.Message.Role == "assistant":
			if ev.Message.StopReason == "error" {
				return r, fmt.Errorf("model call failed: %s", ev.Message.ErrorMessage)
			}
			r.Text = text(ev.Message.Content)
		}
	}
	if r.SessionID == "" {
		return r, errors.New("pi printed no session")
	}
	return r, nil
}

func text(content []json.RawMessage) string {
	var parts []string
	for _, raw := range content {
		var b struct{ Type, Text string }
		if json.Unmarshal(raw, &b) == nil && b.Type == "text" {
			parts = append(parts, b.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// Header is a session file's first line.
type Header struct {
	Type          string `json:"type"` // "session"
	Version       int    `json:"version"`
	ID            string `json:"id"`
	Cwd           string `json:"cwd"`
	ParentSession string `json:"parentSession,omitempty"` // a fork's parent's file
}

// SessionFile returns the file of session id below agentDir: the .jsonl
// file whose header names that id.
func SessionFile(t testing.TB, agentDir, id string) string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(agentDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || !strings.HasSuffix(p, ".jsonl") {
			return err
		}
		h, err := readHeader(p)
		if err != nil {
			return err
		}
		if h.Type == "session" && h.ID == id {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != 1 {
		t.Fatalf("files of session %s below %s: %q", id, agentDir, found)
	}
	return found[0]
}

func readHeader(path string) (Header, error) {
	var h Header
	f, err := os.Open(path)
	if err != nil {
		return h, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return h, nil // empty: not a session
	}
	json.Unmarshal(line, &h)
	return h, nil
}

// Entry is one line of a session file after the header.
type Entry map[string]any

// ID is the entry's id in the session's tree.
func (e Entry) ID() string { s, _ := e["id"].(string); return s }

// ParentID is the id of the entry it follows; "" for the root.
func (e Entry) ParentID() string { s, _ := e["parentId"].(string); return s }

// Role is a message entry's role: "user", "assistant", "toolResult", ….
func (e Entry) Role() string {
	m, _ := e["message"].(map[string]any)
	s, _ := m["role"].(string)
	return s
}

// Text is the text of a message entry.
func (e Entry) Text() string {
	m, _ := e["message"].(map[string]any)
	c, _ := m["content"].([]any)
	var parts []string
	for _, b := range c {
		if block, _ := b.(map[string]any); block["type"] == "text" {
			s, _ := block["text"].(string)
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "\n")
}

// ReadSession returns a session file's header and entries.
func ReadSession(t testing.TB, path string) (Header, []Entry) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, entries, err := ParseSession(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h, entries
}

// ParseSession returns the header and entries of a session file's
// contents.
func ParseSession(b []byte) (Header, []Entry, error) {
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	var h Header
	if err := json.Unmarshal(lines[0], &h); err != nil || h.Type != "session" {
		return h, nil, fmt.Errorf("no session header (%v): %s", err, lines[0])
	}
	var entries []Entry
	for i, line := range lines[1:] {
		var e Entry
		if err := json.Unmarshal(line, &e); err != nil {
			return h, nil, fmt.Errorf("line %d: %w", i+2, err)
		}
		entries = append(entries, e)
	}
	return h, entries, nil
}
