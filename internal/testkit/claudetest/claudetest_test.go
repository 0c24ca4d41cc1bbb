package claudetest_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/homefs/homefs/internal/testkit/claudetest"
	"github.com/homefs/homefs/internal/testkit/mockmessages"
	"github.com/homefs/homefs/internal/testkit/testuser"
)

func startMock(t *testing.T) *mockmessages.Server {
	t.Helper()
	mock, err := mockmessages.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mock.Close() })
	return mock
}

// setup returns an Env whose config dir and a workspace belong to cred.
func setup(t *testing.T, cred *syscall.Credential) (*claudetest.Env, string) {
	t.Helper()
	mock := startMock(t)
	root := testuser.Dir(t, cred)
	e := &claudetest.Env{ConfigDir: filepath.Join(root, "claude-config"), Cred: cred}
	e.WriteConfig(t, mock.URL)
	ws := filepath.Join(root, "workspace")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	testuser.Chown(t, ws, cred)
	return e, ws
}

func users(t *testing.T, test func(t *testing.T, cred *syscall.Credential)) {
	t.Run("self", func(t *testing.T) { test(t, nil) }) // root in CI
	t.Run("nobody", func(t *testing.T) {
		testuser.Require(t)
		test(t, testuser.Nobody)
	})
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestTurnResumeFork runs a turn with a tool call, resumes it (appended to
// the same transcript) and forks it (a new transcript holding a copy of the
// conversation under the fork's session id), as root and as nobody.
func TestTurnResumeFork(t *testing.T) {
	claudetest.Require(t)
	users(t, func(t *testing.T, cred *syscall.Credential) {
		e, ws := setup(t, cred)

		first := e.Turn(t, ws, "make a file\n"+mockmessages.BashDirective+"echo turn > made.txt")
		if got := string(read(t, filepath.Join(ws, "made.txt"))); got != "turn\n" {
			t.Fatalf("made.txt = %q, want the tool call's output", got)
		}
		if !strings.HasPrefix(first.Text, "mock reply ") {
			t.Fatalf("final text %q", first.Text)
		}
		path := claudetest.SessionFile(t, e.ConfigDir, first.SessionID)
		if filepath.Base(path) != first.SessionID+".jsonl" {
			t.Errorf("transcript %s is not named by its session id", path)
		}
		checkTranscriptOwner(t, path, cred)
		checkFirstTranscript(t, path, ws, first.Text)

		before := read(t, path)
		resumed := e.Resume(t, ws, first.SessionID, "second turn")
		if resumed.SessionID != first.SessionID {
			t.Fatalf("resume went to session %s, want %s", resumed.SessionID, first.SessionID)
		}
		after := read(t, path)
		if !bytes.HasPrefix(after, before) || !bytes.Contains(after[len(before):], []byte("second turn")) {
			t.Fatal("the resumed turn was not appended to the transcript")
		}

		checkFork(t, e, ws, first.SessionID, path)
	})
}

// checkTranscriptOwner requires the transcript at path to be mode 0600
// and, when cred is set, owned by its user.
func checkTranscriptOwner(t *testing.T, path string, cred *syscall.Credential) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("transcript mode %v, want 0600", fi.Mode().Perm())
	}
	if cred != nil && fi.Sys().(*syscall.Stat_t).Uid != cred.Uid {
		t.Errorf("transcript owned by uid %d, want %d", fi.Sys().(*syscall.Stat_t).Uid, cred.Uid)
	}
}

// checkFirstTranscript requires the transcript at path to record the
// turn's user messages in ws, a tool call and the final text.
func checkFirstTranscript(t *testing.T, path, ws, text string) {
	t.Helper()
	var sawTool, sawText bool
	for _, r := range claudetest.ReadTranscript(t, path) {
		if r.Type() == "user" && r["cwd"] != ws {
			t.Errorf("user record cwd %v, want %s", r["cwd"], ws)
		}
		if r.Type() == "assistant" {
			sawTool = sawTool || strings.Contains(string(mustJSON(r)), `"tool_use"`)
			sawText = sawText || r.Text() == text
		}
	}
	if !sawTool || !sawText {
		t.Fatalf("transcript lacks the tool call (%v) or the final text (%v)", sawTool, sawText)
	}
}

// checkFork forks session id, whose transcript is path, and requires a
// new transcript that copies the parent's records under the fork's id and
// alone holds the fork's turn.
func checkFork(t *testing.T, e *claudetest.Env, ws, id, path string) {
	t.Helper()
	parent := read(t, path)
	forked := e.Fork(t, ws, id, "turn in the fork")
	if forked.SessionID == id {
		t.Fatal("fork kept the parent's session id")
	}
	if !bytes.Equal(read(t, path), parent) {
		t.Error("forking changed the parent's transcript")
	}
	forkPath := claudetest.SessionFile(t, e.ConfigDir, forked.SessionID)
	copied := map[string]bool{}
	for _, r := range claudetest.ReadTranscript(t, forkPath) {
		if r["sessionId"] != forked.SessionID {
			t.Errorf("fork record %s has sessionId %v", r.Type(), r["sessionId"])
		}
		copied[r.UUID()] = true
	}
	for _, r := range claudetest.ReadTranscript(t, path) {
		if r.UUID() != "" && !copied[r.UUID()] {
			t.Errorf("parent %s record %s not copied into the fork", r.Type(), r.UUID())
		}
	}
	if !bytes.Contains(read(t, forkPath), []byte("turn in the fork")) || bytes.Contains(read(t, path), []byte("turn in the fork")) {
		t.Error("the fork's turn is not in the fork's transcript alone")
	}
}

// TestResumeInOtherCwd records what Claude Code does when a session is
// resumed from another cwd than it was created in. Claude Code 2.1.100
// answered "No conversation found with session ID" and exited 1 (it looked
// only in the cwd's project folder); 2.1.332 finds the transcript in the
// other project folder, appends the turn there, and records the new cwd.
// An unknown id still gets "No conversation found".
func TestResumeInOtherCwd(t *testing.T) {
	claudetest.Require(t)
	e, ws := setup(t, nil)
	other := filepath.Join(filepath.Dir(ws), "other-workspace")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	first := e.Turn(t, ws, "first turn")
	path := claudetest.SessionFile(t, e.ConfigDir, first.SessionID)

	r := e.Resume(t, other, first.SessionID, "resumed elsewhere")
	if r.SessionID != first.SessionID {
		t.Fatalf("resume went to session %s", r.SessionID)
	}
	if got := claudetest.SessionFile(t, e.ConfigDir, first.SessionID); got != path {
		t.Fatalf("transcript moved to %s", got)
	}
	var cwd any
	for _, rec := range claudetest.ReadTranscript(t, path) {
		if rec.Type() == "user" && rec.Text() == "resumed elsewhere" {
			cwd = rec["cwd"]
		}
	}
	if cwd != other {
		t.Errorf("resumed turn's cwd %v, want %s", cwd, other)
	}

	unknown := "00000000-0000-4000-8000-000000000000"
	if r, err := e.Run(t, ws, "--resume", unknown, "x"); err == nil || !strings.Contains(string(r.Stdout)+string(r.Stderr), "No conversation found with session ID") {
		t.Errorf("resuming an unknown session: err %v, output %s%s", err, r.Stdout, r.Stderr)
	}
}

func mustJSON(r claudetest.Record) []byte {
	b, _ := json.Marshal(r)
	return b
}
