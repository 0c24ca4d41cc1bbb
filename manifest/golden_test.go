package manifest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
)

var update = flag.Bool("update", false, "rewrite the golden files in ../testdata/golden")

const goldenDir = "../testdata/golden"

// checkGolden compares got with the named golden file, or rewrites it
// with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join(goldenDir, name)
	if *update {
		if err := os.MkdirAll(goldenDir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./manifest -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: encoding changed (%d bytes, golden %d); if intended, run go test ./manifest -update and review the diff", name, len(got), len(want))
	}
}

func fixtureIndex() []cas.Ref {
	refs := make([]cas.Ref, 5)
	for i := range refs {
		if i != 2 { // a hole
			refs[i] = fakeRef("index chunk %d", i)
		}
	}
	return refs
}

func fixtureSnapshot() *Snapshot {
	return &Snapshot{
		Version:   FormatVersion,
		Session:   "work-2024.01",
		Parent:    fakeRef("parent").Hex(),
		Origin:    &Lineage{Session: "main", Snapshot: fakeRef("origin").Hex()},
		CreatedNs: fixedNs,
		Message:   "before <refactor> & \"cleanup\"\nsecond line ✓",
		Handles: map[string]Handle{
			"codex":  {ID: "0192f3c4-rollout", Through: "turn-17"},
			"claude": {ID: "session-abc"},
		},
		Root: fakeRef("root"),
	}
}

// fixtureLayoutSnapshot is a snapshot of a session with a layout: its
// homes and workspace, and their canonical paths.
func fixtureLayoutSnapshot() *Snapshot {
	s := fixtureSnapshot()
	s.Version = SnapshotLayoutVersion
	s.Layout = &Layout{
		Homes: []Place{
			{Subtree: "claude", At: "/home/agent/.claude", Provider: "claude"},
			{Subtree: "home/.codex", At: "/home/agent/.codex", Provider: "codex"},
		},
		Workspace: &Place{Subtree: "workspace", At: "/workspace"},
	}
	return s
}

// fixtureRootTree is a session's root tree: entries and its own
// attributes.
func fixtureRootTree() *Tree {
	return &Tree{
		Entries: []Entry{{Name: "workspace", Kind: KindDir, Mode: 0o755, UID: 1000, GID: 1000, MtimeNs: fixedNs, CtimeNs: fixedNs, Tree: fakeRef("workspace")}},
		Self:    &DirAttr{Mode: 0o2770, UID: 1000, GID: 100, MtimeNs: fixedNs, CtimeNs: fixedNs + 1, Xattrs: []Xattr{{Name: "user.homefs", Value: []byte("root")}}},
	}
}

func TestGolden(t *testing.T) {
	ctx := context.Background()
	tree := fixtureTree()
	tb, err := EncodeTree(tree)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "tree.bin", tb)
	rb, err := EncodeTree(fixtureRootTree())
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "tree-root.bin", rb)
	checkGolden(t, "tree.txt", []byte(fmt.Sprintf("# tree node %s, %d bytes\n%s", cas.Sum(tb), len(tb), dumpTree(tree))))
	special := fixtureSpecialTree()
	sp, err := EncodeTree(special)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "tree-special.bin", sp)
	checkGolden(t, "tree-special.txt", []byte(fmt.Sprintf("# tree node %s, %d bytes\n%s", cas.Sum(sp), len(sp), dumpTree(special))))
	atimes := fixtureAtimeTree()
	ab, err := EncodeTree(atimes)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "tree-atime.bin", ab)
	checkGolden(t, "tree-atime.txt", []byte(fmt.Sprintf("# tree node %s, %d bytes\n%s", cas.Sum(ab), len(ab), dumpTree(atimes))))
	btimes := fixtureBtimeTree()
	bb, err := EncodeTree(btimes)
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "tree-btime.bin", bb)
	checkGolden(t, "tree-btime.txt", []byte(fmt.Sprintf("# tree node %s, %d bytes\n%s", cas.Sum(bb), len(bb), dumpTree(btimes))))

	ib, err := EncodeIndex(1, fixtureIndex())
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "index.bin", ib)

	sb, err := EncodeSnapshot(fixtureSnapshot())
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "snapshot.json", sb)
	checkGolden(t, "snapshot.id", []byte(SnapshotID(sb)+"\n"))
	lb, err := EncodeSnapshot(fixtureLayoutSnapshot())
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "snapshot-layout.json", lb)

	// The whole Merkle structure of a small home directory.
	s := newStore()
	root := storeFixtureFiles(t, s)
	var walk strings.Builder
	fmt.Fprintf(&walk, "# WalkRefs of the BuildTree fixture\n")
	err = WalkRefs(ctx, s, root, func(ref cas.Ref, kind RefKind, path string) error {
		fmt.Fprintf(&walk, "%-5v %s %q\n", kind, ref.Hex(), path)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "merkle.txt", []byte(walk.String()))
}

// TestGoldenDecode checks that the golden files still decode and re-encode
// byte for byte, so old data stays readable.
func TestGoldenDecode(t *testing.T) {
	if *update {
		t.Skip("updating")
	}
	checkGoldenTrees(t)
	ib := readGolden(t, "index.bin")
	depth, refs, err := DecodeIndex(ib)
	if err != nil || depth != 1 || len(refs) != 5 || refs[2] != (cas.Ref{}) || refs[0] != fakeRef("index chunk 0") {
		t.Errorf("index.bin: depth %d refs %d err %v", depth, len(refs), err)
	}
	sb := readGolden(t, "snapshot.json")
	snap, err := DecodeSnapshot(sb)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Root != fakeRef("root") || snap.Handles["codex"].Through != "turn-17" || snap.Layout != nil {
		t.Errorf("snapshot.json decoded to %+v", snap)
	}
	lsnap, err := DecodeSnapshot(readGolden(t, "snapshot-layout.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(lsnap.Layout, fixtureLayoutSnapshot().Layout) {
		t.Errorf("snapshot-layout.json: layout %+v", lsnap.Layout)
	}
}

// readGolden returns the golden file called name.
func readGolden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// checkGoldenTrees checks that the golden tree nodes decode to their
// fixtures and re-encode byte for byte.
func checkGoldenTrees(t *testing.T) {
	t.Helper()
	tb := readGolden(t, "tree.bin")
	tree, err := DecodeTree(tb)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := EncodeTree(tree); !bytes.Equal(again, tb) {
		t.Error("tree.bin does not re-encode identically")
	}
	if !entriesSliceEqual(tree.Entries, fixtureTree().Entries) {
		t.Error("tree.bin decodes to something else than the fixture")
	}
	rb := readGolden(t, "tree-root.bin")
	root, err := DecodeTree(rb)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := EncodeTree(root); !bytes.Equal(again, rb) {
		t.Error("tree-root.bin does not re-encode identically")
	}
	if want := fixtureRootTree(); !entriesSliceEqual(root.Entries, want.Entries) || !reflect.DeepEqual(root.Self, want.Self) {
		t.Errorf("tree-root.bin decodes to something else than the fixture: %+v", root.Self)
	}
	sp := readGolden(t, "tree-special.bin")
	special, err := DecodeTree(sp)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := EncodeTree(special); !bytes.Equal(again, sp) || sp[len(treeMagic)] != SpecialTreeVersion {
		t.Error("tree-special.bin does not re-encode identically, or not as version 2")
	}
	if !entriesSliceEqual(special.Entries, fixtureSpecialTree().Entries) {
		t.Error("tree-special.bin decodes to something else than the fixture")
	}
}

func entriesSliceEqual(a, b []Entry) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !entriesEqual(&a[i], &b[i]) {
			return false
		}
	}
	return true
}
