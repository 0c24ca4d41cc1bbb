package fork_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/fusefs/fusefstest"
	"github.com/homefs/homefs/internal/testkit/codextest"
	"github.com/homefs/homefs/internal/testkit/mockresponses"
	"github.com/homefs/homefs/manifest"
)

// TestCodexBindResume runs the real Codex CLI (offline, against the mock
// Responses API) on homefs mounts: a turn in session A, a capture, `codex
// exec fork` in A, then session B, forked from A's capture (so it inherits
// A's state_5.sqlite naming A's mountpoint), gets the child bound and
// resumes it. A's bytes must not change, and the bind must store no
// rollout byte.
func TestCodexBindResume(t *testing.T) {
	codextest.Require(t)
	ctx := context.Background()
	mock, err := mockresponses.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer mock.Close()
	store := cas.NewMemory()
	e := fusefstest.NewEngine(t, store)

	a := fusefstest.Mount(t, e, "a")
	parent, child, snap1 := codexTurnAndFork(t, e, a.Dir(), mock.URL)
	sessionsA := filepath.Join(a.Dir(), "codex-home", "sessions")
	beforeA := codextest.HashTree(t, sessionsA)
	rootA, err := e.Root(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}

	// B starts from A's first capture: it has the parent but not the child,
	// and A's state_5.sqlite, which names A's mountpoint.
	if _, err := e.Fork(ctx, "@"+snap1, "b"); err != nil {
		t.Fatal(err)
	}
	b := fusefstest.Mount(t, e, "b")
	if stale := statePaths(t, filepath.Join(b.Dir(), "codex-home"), a.Dir()); stale {
		t.Logf("B inherited state_5.sqlite naming %s", a.Dir())
	}
	if _, err := e.Root(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	chunksBefore := chunkSet(t, store)
	res, err := fork.Bind(ctx, fork.WithStore(e, store), fork.BindRequest{Provider: "codex", ID: child, Source: "a", Target: "b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bind: %+v", res)
	assertOnlyTreeNodes(t, store, chunksBefore)
	if n := len(res.Rollouts); n != 2 || res.Rollouts[1].ID != child || res.Rollouts[0].ID != parent {
		t.Fatalf("bound %+v, want parent then child", res.Rollouts)
	}
	rootB, err := e.Root(ctx, "b")
	if err != nil {
		t.Fatal(err)
	}
	checkBoundByReference(t, store, rootA, rootB, res, b.Dir())

	// Resume the child in B. It must read the parent's history (bound by
	// reference) and write only into B.
	checkResumeInB(t, mock, b.Dir(), child)
	afterA := codextest.HashTree(t, sessionsA)
	if len(afterA) != len(beforeA) {
		t.Errorf("A's sessions: %d files before, %d after", len(beforeA), len(afterA))
	}
	for p, sum := range beforeA {
		if afterA[p] != sum {
			t.Errorf("A's %s changed while B resumed", p)
		}
	}
	if r, _ := e.Root(ctx, "a"); r != rootA {
		t.Errorf("A's tree changed while B resumed")
	}
	childB, err := os.ReadFile(filepath.Join(b.Dir(), filepath.FromSlash(res.Rollouts[1].Path)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(childB, []byte("turn resumed in B")) {
		t.Errorf("B's child rollout lacks the resumed turn")
	}
}

// codexTurnAndFork lays out session a (mounted at dir) for Codex against
// the mock at mockURL, runs a turn, captures, runs `codex exec fork` and
// captures again. It returns the two Codex sessions and the first
// capture.
func codexTurnAndFork(t *testing.T, e *fusefs.Engine, dir, mockURL string) (parent, child, snap1 string) {
	t.Helper()
	ctx := context.Background()
	for _, d := range []string{"codex-home", "workspace"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "codex-home", "config.toml"), []byte(codextest.Config(mockURL)), 0o644); err != nil {
		t.Fatal(err)
	}
	parent = codextest.Exec(t, filepath.Join(dir, "codex-home"), filepath.Join(dir, "workspace"), "first turn in A")
	_, snap1, err := e.Capture(ctx, "a", "after the first turn", map[string]manifest.Handle{"codex": {ID: parent}})
	if err != nil {
		t.Fatal(err)
	}
	child = codextest.Exec(t, filepath.Join(dir, "codex-home"), filepath.Join(dir, "workspace"), "fork", parent, "turn in the fork")
	if child == parent {
		t.Fatalf("fork kept the id %s", child)
	}
	if _, _, err := e.Capture(ctx, "a", "after the fork", nil); err != nil {
		t.Fatal(err)
	}
	return parent, child, snap1
}

// checkBoundByReference requires every rollout res bound into B (root
// rootB, mounted at dirB) to name A's chunks, and what it removed to be
// gone from B's mount.
func checkBoundByReference(t *testing.T, store cas.Getter, rootA, rootB cas.Ref, res fork.BindResult, dirB string) {
	t.Helper()
	for _, r := range res.Rollouts {
		src, dst := entryAt(t, store, rootA, r.SourcePath), entryAt(t, store, rootB, r.Path)
		if dst == nil || !bytes.Equal(refBytes(src), refBytes(dst)) {
			t.Fatalf("%s in B does not name A's chunks", r.Path)
		}
	}
	for _, p := range res.Removed {
		if _, err := os.Stat(filepath.Join(dirB, p)); !os.IsNotExist(err) {
			t.Errorf("%s still in B: %v", p, err)
		}
	}
}

// checkResumeInB resumes Codex session child in the session mounted at
// dirB and requires one model call that carries the whole history.
func checkResumeInB(t *testing.T, mock *mockresponses.Server, dirB, child string) {
	t.Helper()
	before := mock.Responses()
	if got := codextest.Exec(t, filepath.Join(dirB, "codex-home"), filepath.Join(dirB, "workspace"), "resume", child, "turn resumed in B"); got != child {
		t.Fatalf("resume reported session %s, want %s", got, child)
	}
	reqs := mock.Requests()
	last := reqs[len(reqs)-1].Body
	input, _ := json.Marshal(last["input"])
	for _, want := range []string{"first turn in A", "turn in the fork", "turn resumed in B"} {
		if !bytes.Contains(input, []byte(want)) {
			t.Errorf("the resumed request does not carry %q (history lost)", want)
		}
	}
	if mock.Responses() != before+1 {
		t.Errorf("%d model calls for the resume", mock.Responses()-before)
	}
}

// refBytes is the content refs of a file entry, for comparison.
func refBytes(e *manifest.Entry) []byte {
	if e == nil {
		return nil
	}
	var b []byte
	for _, r := range e.Chunks {
		b = append(b, r[:]...)
	}
	return append(append(b, e.Index[:]...), byte(e.Depth))
}

// statePaths reports whether any state_5.sqlite* file in home holds the
// string mount.
func statePaths(t *testing.T, home, mount string) bool {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(home, "state_5.sqlite*"))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil && bytes.Contains(b, []byte(mount)) {
			return true
		}
	}
	return false
}

// TestCodexStaleStateControl is the control for TestCodexBindResume: B,
// forked from A with A's state_5.sqlite left in place, resumes A's session.
// Codex then follows the absolute path it recorded and writes into A's
// rollout, through A's mount: the hazard that dropping derived state
// removes.
func TestCodexStaleStateControl(t *testing.T) {
	codextest.Require(t)
	ctx := context.Background()
	mock, err := mockresponses.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer mock.Close()
	store := cas.NewMemory()
	e := fusefstest.NewEngine(t, store)
	a := fusefstest.Mount(t, e, "a")
	os.Mkdir(filepath.Join(a.Dir(), "codex-home"), 0o755)
	os.Mkdir(filepath.Join(a.Dir(), "workspace"), 0o755)
	if err := os.WriteFile(filepath.Join(a.Dir(), "codex-home", "config.toml"), []byte(codextest.Config(mock.URL)), 0o644); err != nil {
		t.Fatal(err)
	}
	id := codextest.Exec(t, filepath.Join(a.Dir(), "codex-home"), filepath.Join(a.Dir(), "workspace"), "first turn in A")
	if _, err := e.Fork(ctx, "a", "b"); err != nil {
		t.Fatal(err)
	}
	b := fusefstest.Mount(t, e, "b")
	sessionsA := filepath.Join(a.Dir(), "codex-home", "sessions")
	beforeA := codextest.HashTree(t, sessionsA)
	codextest.Exec(t, filepath.Join(b.Dir(), "codex-home"), filepath.Join(b.Dir(), "workspace"), "resume", id, "turn resumed in B")
	changed := false
	for p, sum := range codextest.HashTree(t, sessionsA) {
		changed = changed || beforeA[p] != sum
	}
	if !changed {
		t.Skip("this Codex no longer follows the recorded path into A; the drop of derived state is then merely harmless")
	}
	t.Logf("confirmed: with A's state_5.sqlite, Codex resumed in B wrote into A's rollout")

	// With the derived state dropped, a second fork resumes without
	// touching A.
	if _, err := e.Fork(ctx, "a", "c"); err != nil {
		t.Fatal(err)
	}
	c := fusefstest.Mount(t, e, "c")
	dropped, err := fork.DropDerived(ctx, fork.WithStore(e, store), "c", nil)
	if err != nil || len(dropped.Removed) == 0 {
		t.Fatalf("DropDerived: %v, %v", dropped, err)
	}
	beforeA = codextest.HashTree(t, sessionsA)
	codextest.Exec(t, filepath.Join(c.Dir(), "codex-home"), filepath.Join(c.Dir(), "workspace"), "resume", id, "turn resumed in C")
	for p, sum := range codextest.HashTree(t, sessionsA) {
		if beforeA[p] != sum {
			t.Errorf("A's %s changed while C resumed after DropDerived", p)
		}
	}
}
