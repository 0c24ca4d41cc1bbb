package remote_test

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
	"github.com/homefs/homefs/internal/remote"
	"github.com/homefs/homefs/internal/testkit/codextest"
	"github.com/homefs/homefs/internal/testkit/mockresponses"
	"github.com/homefs/homefs/manifest"
)

// TestCodexResumeOnAnotherHost moves a real Codex conversation between two
// hosts through the remote: a turn on A, capture and push; on B a lazy
// pull, a writable session from the snapshot whose codex-home and
// workspace are mounted at other paths than on A, derived state dropped,
// `codex exec resume`, capture and push; then A pulls B's turn back.
//
// Both hosts run on one machine, so A's mountpoints exist while Codex runs
// on B: had B kept A's state_5.sqlite, Codex would follow the absolute
// rollout path it records into A's live mount. The test checks that A's
// bytes never change.
//
// B keeps the session name: its snapshot descends from A's (Origin), so
// the remote head of "agent" moves forward from A's turn to B's, which is
// what a conversation continued elsewhere should look like to the fleet.
// Had A captured another turn meanwhile, B's push would be ErrConflict
// and B would have to push under another name.
func TestCodexResumeOnAnotherHost(t *testing.T) {
	codextest.Require(t)
	_, _, ra, rb := sharedRemotes(t)
	mock, err := mockresponses.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mock.Close() })
	c := &codexHop{
		t: t, ctx: context.Background(), mock: mock,
		a: newTestHost(t, ra), b: newTestHost(t, rb), ra: ra, rb: rb,
	}
	c.turnOnA()
	fetched := c.lazyPullOnB()
	c.resumeOnB(fetched)
	c.pushFromB()
	c.pullBackOnA()

	// A's live session: same bytes, same root, same head as before B ran.
	c.untouchedA("after the pull back")
	if r, err := c.a.e.Root(c.ctx, "agent"); err != nil || r != c.rootA {
		t.Errorf("A's root is %s (%v), was %s", r.Short(), err, c.rootA.Short())
	}
	if h, err := c.a.cat.Head(c.ctx, "agent"); err != nil || h.Snapshot != c.s1 {
		t.Errorf("A's head: %+v, %v; want snapshot %s", h, err, c.s1[:12])
	}
}

// codexHop is TestCodexResumeOnAnotherHost's state, filled in step by
// step.
type codexHop struct {
	t      *testing.T
	ctx    context.Context
	mock   *mockresponses.Server
	a, b   *testHost
	ra, rb *remote.Remote

	id, s1, s2         string // the Codex session, A's and B's snapshots
	s1Root             cas.Ref
	homeA, wsA         string
	homeB, wsB         string
	rolloutRel         string
	rolloutA, rolloutB []byte
	beforeA            map[string]map[string][32]byte
	rootA              cas.Ref
}

// turnOnA writes the session's layout on A through a whole-session mount
// that is gone before Codex runs (Codex sees only the two subtrees), runs
// a turn, captures and pushes it.
func (c *codexHop) turnOnA() {
	t, a := c.t, c.a
	setup := a.mount(t, "agent")
	writeFile(t, filepath.Join(setup, "codex-home", "config.toml"), []byte(codextest.Config(c.mock.URL)))
	writeFile(t, filepath.Join(setup, "workspace", "README.md"), []byte("written on A\n"))
	if err := a.e.Unmount(setup); err != nil {
		t.Fatal(err)
	}
	c.homeA, c.wsA = a.mountSubtree(t, "agent", "codex-home"), a.mountSubtree(t, "agent", "workspace")

	c.id = codextest.Exec(t, c.homeA, c.wsA, "first turn on A")
	s1Snap, s1, err := a.e.Capture(c.ctx, "agent", "turn on A", map[string]manifest.Handle{"codex": {ID: c.id}})
	if err != nil {
		t.Fatal(err)
	}
	c.s1, c.s1Root = s1, s1Snap.Root
	c.rolloutRel = findRollout(t, c.homeA, c.id)
	if c.rolloutA, err = os.ReadFile(filepath.Join(c.homeA, c.rolloutRel)); err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Push(c.ctx, a.rec, a.cat, c.ra, "agent", remote.PushOptions{}); err != nil {
		t.Fatal(err)
	}
	c.beforeA = map[string]map[string][32]byte{"codex-home": codextest.HashTree(t, c.homeA), "workspace": codextest.HashTree(t, c.wsA)}
	if c.rootA, err = a.e.Root(c.ctx, "agent"); err != nil {
		t.Fatal(err)
	}
	if c.rootA != c.s1Root {
		t.Fatalf("A's root moved after the capture: %s, captured %s", c.rootA.Short(), c.s1Root.Short())
	}
}

// untouchedA checks A's live files against beforeA.
func (c *codexHop) untouchedA(when string) {
	t := c.t
	t.Helper()
	for dir, mnt := range map[string]string{"codex-home": c.homeA, "workspace": c.wsA} {
		after := codextest.HashTree(t, mnt)
		for p, sum := range c.beforeA[dir] {
			if after[p] != sum {
				t.Errorf("%s: A's %s/%s changed", when, dir, p)
			}
		}
		for p := range after {
			if _, ok := c.beforeA[dir][p]; !ok {
				t.Errorf("%s: A's %s/%s appeared", when, dir, p)
			}
		}
	}
}

// lazyPullOnB pulls A's turn onto B, nodes only (the rollout's chunks
// stay on the remote), makes a writable session of it mounted at other
// paths than on A and drops its derived state. It returns B's count of
// fetched chunks before the mounts.
func (c *codexHop) lazyPullOnB() (fetched int64) {
	t, b := c.t, c.b
	pr, err := remote.Pull(c.ctx, b.rec, b.cat, c.rb, "agent", remote.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pr.ID != c.s1 {
		t.Fatalf("B pulled %s, A pushed %s", pr.ID[:12], c.s1[:12])
	}
	if err := b.rt.Hint(c.ctx, pr.Snapshot.Root); err != nil { // as the daemon does after a pull
		t.Fatal(err)
	}
	if n := localChunks(t, b, pr.Snapshot.Root, "codex-home/"+c.rolloutRel); n != 0 {
		t.Fatalf("B holds %d of the rollout's chunks right after a lazy pull", n)
	}
	fetched = b.rt.Stats().Fetched
	if _, err := b.cat.CreateSession(c.ctx, "agent", c.s1); err != nil {
		t.Fatal(err)
	}
	c.homeB, c.wsB = b.mountSubtree(t, "agent", "codex-home"), b.mountSubtree(t, "agent", "workspace")
	if c.homeB == c.homeA || c.wsB == c.wsA {
		t.Fatal("B's mountpoints must differ from A's")
	}
	checkFile(t, filepath.Join(c.wsB, "README.md"), []byte("written on A\n"))
	if stateNames(c.homeB, c.homeA) {
		t.Logf("B inherited A's state_5.sqlite naming %s", c.homeA)
	}
	dropped, err := fork.DropDerived(c.ctx, fork.WithStore(b.e, b.rec), "agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !containsString(dropped.Removed, "codex-home/state_5.sqlite") {
		t.Fatalf("DropDerived removed %v, not codex-home/state_5.sqlite", dropped.Removed)
	}
	if stateNames(c.homeB, c.homeA) {
		t.Fatalf("B's home still names %s after DropDerived", c.homeA)
	}
	return fetched
}

// resumeOnB resumes the conversation on B, which must leave A's files as
// they were, send the model the history read lazily through the pulled
// rollout, and extend that rollout.
func (c *codexHop) resumeOnB(fetched int64) {
	t, b := c.t, c.b
	responses := c.mock.Responses()
	if got := codextest.Exec(t, c.homeB, c.wsB, "resume", c.id, "resumed turn on B"); got != c.id {
		t.Fatalf("resume on B reported session %s, want %s", got, c.id)
	}
	c.untouchedA("after the resume on B (Codex followed a recorded path into A's mount?)")
	if t.Failed() {
		t.FailNow()
	}
	if n := c.mock.Responses() - responses; n != 1 {
		t.Errorf("%d model calls for the resume on B, want 1", n)
	}
	reqs := c.mock.Requests()
	input, _ := json.Marshal(reqs[len(reqs)-1].Body["input"])
	// "mock reply 1" exists only in A's rollout: the mock keeps no history.
	for _, want := range []string{"first turn on A", "mock reply 1", "resumed turn on B"} {
		if !bytes.Contains(input, []byte(want)) {
			t.Errorf("the request of the resume on B lacks %q: the history did not come through the pulled rollout", want)
		}
	}
	st := b.rt.Stats()
	t.Logf("B: %d chunks fetched on demand, %d ahead, during mount and resume", st.Fetched-fetched, st.Prefetched)
	if st.Fetched == fetched {
		t.Error("B fetched no chunk from the remote: the rollout was not read lazily through it")
	}
	if rel := findRollout(t, c.homeB, c.id); rel != c.rolloutRel {
		t.Fatalf("B's rollout is %s, A's %s", rel, c.rolloutRel)
	}
	var err error
	if c.rolloutB, err = os.ReadFile(filepath.Join(c.homeB, c.rolloutRel)); err != nil {
		t.Fatal(err)
	}
	if len(c.rolloutB) <= len(c.rolloutA) || !bytes.HasPrefix(c.rolloutB, c.rolloutA) {
		t.Fatalf("B's rollout (%d bytes) does not extend A's (%d bytes)", len(c.rolloutB), len(c.rolloutA))
	}
	if !bytes.Contains(c.rolloutB[len(c.rolloutA):], []byte("resumed turn on B")) {
		t.Fatal("B's rollout grew without the resumed turn")
	}
}

// pushFromB captures B's turn and pushes it: the head of agent moves
// forward from A's turn to B's.
func (c *codexHop) pushFromB() {
	t, b := c.t, c.b
	_, s2, err := b.e.Capture(c.ctx, "agent", "turn on B", map[string]manifest.Handle{"codex": {ID: c.id}})
	if err != nil {
		t.Fatal(err)
	}
	c.s2 = s2
	pushB, err := remote.Push(c.ctx, b.rec, b.cat, c.rb, "agent", remote.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !pushB.HeadMoved || pushB.Head.Snapshot != s2 {
		t.Fatalf("B's push left the head of agent at %+v, want %s", pushB.Head, s2[:12])
	}
	t.Logf("B's turn: %d objects, %d bytes uploaded", pushB.Uploaded, pushB.UploadedBytes)
}

// pullBackOnA pulls B's turn onto A and reads it lazily through a
// snapshot mount.
func (c *codexHop) pullBackOnA() {
	t, a := c.t, c.a
	fetched := a.rt.Stats().Fetched
	back, err := remote.Pull(c.ctx, a.rec, a.cat, c.ra, "agent", remote.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if back.ID != c.s2 || back.Snapshot.Origin == nil || back.Snapshot.Origin.Snapshot != c.s1 {
		t.Fatalf("A pulled %s (%+v), want B's %s descending from %s", back.ID[:12], back.Snapshot.Origin, c.s2[:12], c.s1[:12])
	}
	snapHome := a.mountSnapshotSubtree(t, c.s2, "codex-home")
	got, err := os.ReadFile(filepath.Join(snapHome, c.rolloutRel))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, c.rolloutB) {
		t.Fatalf("A reads %d bytes of B's rollout, B wrote %d", len(got), len(c.rolloutB))
	}
	checkRecords(t, got, len(c.rolloutA))
	if a.rt.Stats().Fetched == fetched {
		t.Error("A fetched none of B's chunks from the remote")
	}
}

// mountSubtree mounts noatime: the test reads a host's files to check them
// untouched, and with relatime those reads would set access times, which
// a capture keeps, and move the root it checks.
func (h *testHost) mountSubtree(t *testing.T, session, subtree string) string {
	t.Helper()
	m, err := h.e.Mount(context.Background(), session, subtree, t.TempDir(), fusefs.MountOptions{NoAtime: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount() })
	return m.Dir()
}

func (h *testHost) mountSnapshotSubtree(t *testing.T, id, subtree string) string {
	t.Helper()
	m, err := h.e.MountSnapshot(context.Background(), id, subtree, t.TempDir(), fusefs.MountOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount() })
	return m.Dir()
}

// findRollout returns the path below home of the one rollout of id.
func findRollout(t *testing.T, home, id string) string {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(home, "sessions", "*", "*", "*", "rollout-*-"+id+".jsonl"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("rollouts of %s in %s: %v, %v", id, home, matches, err)
	}
	rel, _ := filepath.Rel(home, matches[0])
	return rel
}

// localChunks counts the chunks of the file at path in root that h's local
// store holds (the ReadThrough's remote not asked).
func localChunks(t *testing.T, h *testHost, root cas.Ref, path string) int {
	t.Helper()
	ctx := context.Background()
	local := h.rt.Unwrap()
	var refs []cas.Ref
	err := manifest.Walk(ctx, local, root, func(p string, e *manifest.Entry) error {
		if p != path {
			return nil
		}
		cl, err := manifest.LoadChunkList(ctx, local, e)
		if err != nil {
			return err
		}
		for i := 0; i < cl.Len(); i++ {
			if r := cl.At(i); !r.IsZero() {
				refs = append(refs, r)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) == 0 {
		t.Fatalf("%s: no chunk in the snapshot", path)
	}
	has, err := local.HasMany(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ok := range has {
		if ok {
			n++
		}
	}
	return n
}

// stateNames reports whether a state_5.sqlite* file in home holds the
// string path.
func stateNames(home, path string) bool {
	matches, _ := filepath.Glob(filepath.Join(home, "state_5.sqlite*"))
	for _, m := range matches {
		if b, err := os.ReadFile(m); err == nil && bytes.Contains(b, []byte(path)) {
			return true
		}
	}
	return false
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkRecords checks that rollout is whole JSON lines, A's turn (its
// first split bytes) then B's, with the records' ordinals rising across
// the boundary when Codex writes them.
func checkRecords(t *testing.T, rollout []byte, split int) {
	t.Helper()
	if split == 0 || rollout[split-1] != '\n' || !bytes.HasSuffix(rollout, []byte("\n")) {
		t.Fatalf("the rollout does not split into whole lines at A's %d bytes", split)
	}
	prev := -1.0
	for i, line := range bytes.Split(bytes.TrimSuffix(rollout, []byte("\n")), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("line %d is not a JSON object: %v", i+1, err)
		}
		if o, ok := rec["ordinal"].(float64); ok {
			if o <= prev {
				t.Errorf("line %d: ordinal %v after %v", i+1, o, prev)
			}
			prev = o
		}
	}
	if !bytes.Contains(rollout[:split], []byte("first turn on A")) || bytes.Contains(rollout[:split], []byte("resumed turn on B")) {
		t.Error("A's part of the rollout is not A's turn")
	}
	if !bytes.Contains(rollout[split:], []byte("resumed turn on B")) {
		t.Error("B's part of the rollout lacks B's turn")
	}
}
