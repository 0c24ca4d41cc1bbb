package manifest

import (
	"bytes"
	"context"
	"errors"
	"testing"
)

// TestBtimeTreeVersion: a tree recording a birth time (an entry's or its
// own) is version 4 and only version 4, whatever else it holds; every
// other tree keeps version 1, 2 or 3 and its bytes.
func TestBtimeTreeVersion(t *testing.T) {
	version := func(tree *Tree) byte { return encodedVersion(t, tree) }
	if v := version(fixtureBtimeTree()); v != BtimeTreeVersion {
		t.Errorf("btimes: version %d", v)
	}
	for _, tc := range []struct {
		what string
		tree *Tree
		want byte
	}{
		{"plain", fixtureTree(), FormatVersion},
		{"special files", fixtureSpecialTree(), SpecialTreeVersion},
		{"atimes", fixtureAtimeTree(), AtimeTreeVersion},
	} {
		if v := version(tc.tree); v != tc.want {
			t.Errorf("%s, no btime: version %d, want %d", tc.what, v, tc.want)
		}
		tc.tree.Entries[len(tc.tree.Entries)-1].BtimeNs = fixedNs
		if v := version(tc.tree); v != BtimeTreeVersion {
			t.Errorf("%s and a btime: version %d", tc.what, v)
		}
	}
	self := selfTree()
	self.Self.BtimeNs = 1
	if v := version(self); v != BtimeTreeVersion {
		t.Errorf("the root's own btime: version %d", v)
	}
	self.Self.BtimeNs, self.Self.AtimeNs = 0, 1
	if v := version(self); v != AtimeTreeVersion {
		t.Errorf("the root's own atime, no btime: version %d", v)
	}

	// One encoding per tree: version 4 without a btime (with or without
	// atimes), and a btime tree passed off as version 3, are refused.
	for _, tree := range []*Tree{fixtureTree(), fixtureAtimeTree()} {
		b, err := encodeTree(tree, BtimeTreeVersion)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeTree(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("version 4 with no btime: got %v, want ErrMalformed", err)
		}
	}
	b, err := EncodeTree(fixtureBtimeTree())
	if err != nil {
		t.Fatal(err)
	}
	v3 := bytes.Clone(b)
	v3[len(treeMagic)] = AtimeTreeVersion
	if _, err := DecodeTree(v3); err == nil {
		t.Error("a btime tree decoded as version 3")
	}
	v5 := bytes.Clone(b)
	v5[len(treeMagic)] = BtimeTreeVersion + 1
	if _, err := DecodeTree(v5); !errors.Is(err, ErrUnsupportedVersion) {
		t.Errorf("version 5: got %v, want ErrUnsupportedVersion", err)
	}
	checkRoundTrip(t, b, fixtureBtimeTree())
}

// TestBuildTreeBtime: BuildTree keeps the root's own birth time.
func TestBuildTreeBtime(t *testing.T) {
	s := newStore()
	ctx := context.Background()
	files := map[string]Entry{
		"":  {Kind: KindDir, Mode: 0o755, MtimeNs: fixedNs, CtimeNs: fixedNs, BtimeNs: fixedNs - 2},
		"f": fileEntry("f", 1),
	}
	r, err := BuildTree(ctx, s, files)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := GetTree(ctx, s, r)
	if err != nil {
		t.Fatal(err)
	}
	if tree.Self == nil || tree.Self.BtimeNs != fixedNs-2 {
		t.Errorf("root's own attributes %+v, want btime %d", tree.Self, fixedNs-2)
	}
}
