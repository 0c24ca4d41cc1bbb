package pitest_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/homefs/homefs/internal/testkit/mockmessages"
	"github.com/homefs/homefs/internal/testkit/pitest"
	"github.com/homefs/homefs/internal/testkit/testuser"
)

// setup returns an Env whose agent dir and a workspace belong to cred.
func setup(t *testing.T, cred *syscall.Credential) (*pitest.Env, string) {
	t.Helper()
	mock, err := mockmessages.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mock.Close() })
	root := testuser.Dir(t, cred)
	e := &pitest.Env{AgentDir: filepath.Join(root, "pi-agent"), Cred: cred}
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
// the same file, continuing its tree) and forks it (a new file with a copy
// of every entry, whose header names the parent's file), as root and as
// nobody.
func TestTurnResumeFork(t *testing.T) {
	pitest.Require(t)
	users(t, func(t *testing.T, cred *syscall.Credential) {
		e, ws := setup(t, cred)

		first := e.Turn(t, ws, "make a file\n"+mockmessages.BashDirective+"echo turn > made.txt")
		if got := string(read(t, filepath.Join(ws, "made.txt"))); got != "turn\n" {
			t.Fatalf("made.txt = %q, want the tool call's output", got)
		}
		if !strings.HasPrefix(first.Text, "mock reply ") {
			t.Fatalf("final text %q", first.Text)
		}
		path := pitest.SessionFile(t, e.AgentDir, first.SessionID)
		if !strings.HasSuffix(filepath.Base(path), "_"+first.SessionID+".jsonl") {
			t.Errorf("session file %s is not named by its id", path)
		}
		if fi, err := os.Stat(path); err != nil {
			t.Fatal(err)
		} else if cred != nil && fi.Sys().(*syscall.Stat_t).Uid != cred.Uid {
			t.Errorf("session file owned by uid %d, want %d", fi.Sys().(*syscall.Stat_t).Uid, cred.Uid)
		}
		entries := checkFirstSession(t, path, ws, first.Text)

		before := read(t, path)
		resumed := e.Resume(t, ws, first.SessionID, "second turn")
		if resumed.SessionID != first.SessionID {
			t.Fatalf("resume went to session %s, want %s", resumed.SessionID, first.SessionID)
		}
		after := read(t, path)
		if !bytes.HasPrefix(after, before) {
			t.Fatal("the resumed turn rewrote the session file")
		}
		_, all := pitest.ReadSession(t, path)
		added := all[len(entries):]
		if len(added) == 0 || added[0].Text() != "second turn" || added[0].ParentID() != entries[len(entries)-1].ID() {
			t.Fatalf("the resumed turn does not continue the tree: %v", added)
		}

		checkFork(t, e, ws, first.SessionID, path, all)
	})
}

// checkFirstSession requires the session file at path to have a version 3
// header for ws without a parent, and a tool call and the final text as
// its messages; it returns the file's entries.
func checkFirstSession(t *testing.T, path, ws, text string) []pitest.Entry {
	t.Helper()
	h, entries := pitest.ReadSession(t, path)
	if h.Version != 3 || h.Cwd != ws || h.ParentSession != "" {
		t.Errorf("header %+v", h)
	}
	var roles []string
	for _, en := range entries {
		if r := en.Role(); r != "" {
			roles = append(roles, r)
		}
	}
	if got := strings.Join(roles, " "); got != "user assistant toolResult assistant" {
		t.Errorf("messages %q, want a tool call and a final text", got)
	}
	if last := entries[len(entries)-1]; last.Text() != text {
		t.Errorf("last entry %q, want the final text %q", last.Text(), text)
	}
	return entries
}

// checkFork forks session id, whose file is path and holds all, and
// requires a new file whose header names path and which copies every
// entry before the fork's turn.
func checkFork(t *testing.T, e *pitest.Env, ws, id, path string, all []pitest.Entry) {
	t.Helper()
	parent := read(t, path)
	forked := e.Fork(t, ws, id, "turn in the fork")
	if forked.SessionID == id {
		t.Fatal("fork kept the parent's session id")
	}
	if !bytes.Equal(read(t, path), parent) {
		t.Error("forking changed the parent's file")
	}
	forkPath := pitest.SessionFile(t, e.AgentDir, forked.SessionID)
	fh, fentries := pitest.ReadSession(t, forkPath)
	if fh.ParentSession != path || fh.Cwd != ws {
		t.Errorf("fork header %+v, want parentSession %s", fh, path)
	}
	if len(fentries) <= len(all) {
		t.Fatalf("fork has %d entries, parent %d", len(fentries), len(all))
	}
	for i, en := range all {
		if fentries[i].ID() != en.ID() {
			t.Errorf("fork entry %d is %s, parent's %s", i, fentries[i].ID(), en.ID())
		}
	}
	if fentries[len(all)].Text() != "turn in the fork" {
		t.Errorf("fork's first new entry %q", fentries[len(all)].Text())
	}
}

// TestResumeInOtherCwd records what Pi does when a session is resumed from
// another cwd than it was created in: by id it asks "Fork this session into
// current directory? [y/N]", reads no answer from an empty stdin, and exits
// 0 having done nothing; by its file's path it resumes, but runs its tools
// in the cwd the header records, not in the current one.
func TestResumeInOtherCwd(t *testing.T) {
	pitest.Require(t)
	e, ws := setup(t, nil)
	other := filepath.Join(filepath.Dir(ws), "other-workspace")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	first := e.Turn(t, ws, "first turn")
	path := pitest.SessionFile(t, e.AgentDir, first.SessionID)
	before := read(t, path)

	r, err := e.Run(t, other, "--session", first.SessionID, "resumed elsewhere")
	var exit *exec.ExitError
	if errors.As(err, &exit) || r.SessionID != "" {
		t.Fatalf("resume by id elsewhere: err %v, session %q", err, r.SessionID)
	}
	if out := string(r.Stdout) + string(r.Stderr); !strings.Contains(out, "Fork this session into current directory?") {
		t.Errorf("resume by id elsewhere printed %q", out)
	}
	if !bytes.Equal(read(t, path), before) {
		t.Error("the session file changed")
	}

	r = e.Resume(t, other, path, "where am I\n"+mockmessages.BashDirective+"pwd > where.txt")
	if r.SessionID != first.SessionID {
		t.Fatalf("resume by path went to session %s", r.SessionID)
	}
	if got := strings.TrimSpace(string(read(t, filepath.Join(ws, "where.txt")))); got != ws {
		t.Errorf("tool ran in %q, want the header's cwd %s", got, ws)
	}
	if _, err := os.Stat(filepath.Join(other, "where.txt")); err == nil {
		t.Error("tool ran in the current cwd")
	}
}
