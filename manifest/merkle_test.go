package manifest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
)

func TestWalk(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	root := storeFixtureFiles(t, s)
	var got []string
	err := Walk(ctx, s, root, func(p string, e *Entry) error {
		got = append(got, fmt.Sprintf("%v %s", e.Kind, p))
		if !strings.HasSuffix(p, e.Name) {
			t.Errorf("path %q for entry %q", p, e.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"file .bashrc", "dir big", "file big/video.bin", "dir docs", "dir docs/deep", "dir docs/deep/er",
		"dir docs/deep/er/still", "file docs/deep/er/still/file.md", "dir empty-dir", "symlink link",
		"file notes.txt", "dir src", "dir src/lib", "file src/lib/a.go", "file src/lib/b.go", "file src/main.go",
	}
	if !slices.Equal(got, want) {
		t.Errorf("walk:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// SkipSubtree on a directory skips its content only.
	got = nil
	err = Walk(ctx, s, root, func(p string, e *Entry) error {
		got = append(got, p)
		if p == "docs" {
			return SkipSubtree
		}
		return nil
	})
	if err != nil || slices.Contains(got, "docs/deep") || !slices.Contains(got, "src/main.go") {
		t.Errorf("skip: %v %v", got, err)
	}

	// Other errors stop the walk and come back unchanged.
	stop := errors.New("stop")
	if err := Walk(ctx, s, root, func(string, *Entry) error { return stop }); err != stop {
		t.Errorf("got %v", err)
	}
}

func TestBuildTreeDirAttrs(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	root := storeFixtureFiles(t, s)
	attrs := map[string]*Entry{}
	if err := Walk(ctx, s, root, func(p string, e *Entry) error { attrs[p] = e; return nil }); err != nil {
		t.Fatal(err)
	}
	if e := attrs["src"]; e.Mode != 0o750 || e.UID != 1000 {
		t.Errorf("explicit dir lost its attributes: %+v", e)
	}
	if e := attrs["docs/deep"]; e.Mode != DefaultDirMode || e.MtimeNs != 0 {
		t.Errorf("implicit dir: %+v", e)
	}
	if e := attrs["empty-dir"]; e.Tree != EmptyTreeRef() {
		t.Errorf("empty dir tree %s", e.Tree)
	}
}

func TestBuildTreeRejects(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		what  string
		files map[string]Entry
		want  error
	}{
		{"bad path", map[string]Entry{"/abs": fileEntry("x", 0)}, ErrInvalidPath},
		{"file as dir", map[string]Entry{"a": fileEntry("a", 0), "a/b": fileEntry("b", 0)}, ErrInvalidPath},
		{"bad entry", map[string]Entry{"a": {Kind: KindFile, Size: 5}}, ErrInvalid},
	} {
		if _, err := BuildTree(ctx, newStore(), tc.files); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, err, tc.want)
		}
	}
	ref, err := BuildTree(ctx, newStore(), nil)
	if err != nil || ref != EmptyTreeRef() {
		t.Errorf("empty: %s %v", ref, err)
	}
}

func TestWalkRefs(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	root := storeFixtureFiles(t, s)
	counts := map[RefKind]int{}
	seen := map[cas.Ref]bool{}
	var nodes []cas.Ref
	err := WalkRefs(ctx, s, root, func(ref cas.Ref, kind RefKind, path string) error {
		if ref.IsZero() {
			t.Errorf("zero ref at %q", path)
		}
		counts[kind]++
		if seen[ref] {
			return SkipSubtree
		}
		seen[ref] = true
		if kind != Chunk {
			nodes = append(nodes, ref)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// 9 directories with the root; 1 index; 6 one-chunk files and the 19
	// chunks of video.bin less one hole.
	if counts[TreeNode] != 9 || counts[IndexNode] != 1 || counts[Chunk] != 6+18 {
		t.Errorf("counts %v", counts)
	}
	// Every reachable node is in the store (the fixture's chunks are fake).
	has, err := s.HasMany(ctx, nodes)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range has {
		if !ok {
			t.Errorf("node %s reachable but not stored", nodes[i].Short())
		}
	}
	// SkipSubtree on the root reads nothing.
	s.resetCounts()
	err = WalkRefs(ctx, s, root, func(cas.Ref, RefKind, string) error { return SkipSubtree })
	if err != nil || s.gets.Load() != 0 {
		t.Errorf("skip root: %v, %d gets", err, s.gets.Load())
	}
}

func TestGetTreeErrorsNameTheRef(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	bad, err := s.Put(ctx, []byte("not a tree"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = GetTree(ctx, s, bad)
	if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), bad.Hex()) {
		t.Errorf("got %v", err)
	}
	_, err = GetTree(ctx, s, fakeRef("missing"))
	if !errors.Is(err, cas.ErrNotFound) {
		t.Errorf("got %v", err)
	}
	// Walk names the directory whose tree is missing.
	root, err := PutTree(ctx, s, &Tree{Entries: []Entry{{Name: "gone", Kind: KindDir, Mode: 0o755, Tree: fakeRef("gone")}}})
	if err != nil {
		t.Fatal(err)
	}
	err = Walk(ctx, s, root, func(string, *Entry) error { return nil })
	if !errors.Is(err, cas.ErrNotFound) || !strings.HasPrefix(err.Error(), "gone: ") {
		t.Errorf("got %v", err)
	}
}

type change struct {
	path     string
	old, new string // kinds, "" when absent
}

func kindOf(e *Entry) string {
	if e == nil {
		return ""
	}
	return e.Kind.String()
}

func TestDiff(t *testing.T) {
	ctx := context.Background()
	s := newStore()
	files := fixtureFiles()
	a, err := BuildTree(ctx, s, files)
	if err != nil {
		t.Fatal(err)
	}
	changed := fixtureFiles()
	e := changed["docs/deep/er/still/file.md"]
	e.MtimeNs++
	changed["docs/deep/er/still/file.md"] = e
	delete(changed, "src/lib/a.go")
	delete(changed, "src/lib/b.go") // src/lib disappears (implicit dir)
	changed["src/new.go"] = fileEntry("new", 3)
	changed["notes.txt/x"] = fileEntry("x", 1) // notes.txt becomes a dir
	delete(changed, "notes.txt")
	b, err := BuildTree(ctx, s, changed)
	if err != nil {
		t.Fatal(err)
	}
	var got []change
	collect := func(p string, old, new *Entry) error {
		got = append(got, change{p, kindOf(old), kindOf(new)})
		return nil
	}
	if err := Diff(ctx, s, a, b, collect); err != nil {
		t.Fatal(err)
	}
	want := []change{
		{"docs/deep/er/still/file.md", "file", "file"},
		{"notes.txt", "file", "dir"},
		{"notes.txt/x", "", "file"},
		{"src/lib", "dir", ""},
		{"src/lib/a.go", "file", ""},
		{"src/lib/b.go", "file", ""},
		{"src/new.go", "", "file"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("diff:\n%v\nwant\n%v", got, want)
	}

	// Identical trees: no calls, no reads.
	got = nil
	s.resetCounts()
	if err := Diff(ctx, s, a, a, collect); err != nil || len(got) != 0 || s.gets.Load() != 0 {
		t.Errorf("self diff: %v %v, %d gets", got, err, s.gets.Load())
	}
	// A zero ref is an empty tree: everything is added.
	got = nil
	if err := Diff(ctx, s, cas.Ref{}, a, collect); err != nil || len(got) != 16 {
		t.Errorf("diff from empty: %d changes, %v", len(got), err)
	}
	// One deep change reads only the trees on its path: root, docs, deep,
	// er, still on each side.
	files2 := fixtureFiles()
	e = files2["docs/deep/er/still/file.md"]
	e.Size++
	files2["docs/deep/er/still/file.md"] = e
	c, _ := BuildTree(ctx, s, files2)
	got = nil
	s.resetCounts()
	if err := Diff(ctx, s, a, c, collect); err != nil || len(got) != 1 {
		t.Fatalf("%v %v", got, err)
	}
	if n := s.gets.Load(); n != 10 {
		t.Errorf("diff of one deep change read %d trees, want 10", n)
	}
}
