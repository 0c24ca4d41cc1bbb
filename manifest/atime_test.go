package manifest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
)

// TestAtimeTreeVersion: a tree recording an access time (an entry's or
// its own) is version 3 and only version 3, whatever else it holds; every
// other tree keeps version 1 or 2 and its bytes.
func TestAtimeTreeVersion(t *testing.T) {
	version := func(tree *Tree) byte { return encodedVersion(t, tree) }
	if v := version(fixtureAtimeTree()); v != AtimeTreeVersion {
		t.Errorf("atimes: version %d", v)
	}
	special := fixtureSpecialTree()
	if v := version(special); v != SpecialTreeVersion {
		t.Errorf("special files, no atime: version %d", v)
	}
	special.Entries[1].AtimeNs = fixedNs
	if v := version(special); v != AtimeTreeVersion {
		t.Errorf("special files and an atime: version %d", v)
	}
	self := selfTree()
	self.Self.AtimeNs = 1
	if v := version(self); v != AtimeTreeVersion {
		t.Errorf("the root's own atime: version %d", v)
	}
	if v := version(fixtureTree()); v != FormatVersion {
		t.Errorf("no atime: version %d", v)
	}

	// One encoding per tree: version 3 without an atime, and an atime
	// tree passed off as version 2, are refused.
	b, err := encodeTree(fixtureTree(), AtimeTreeVersion)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeTree(b); !errors.Is(err, ErrMalformed) {
		t.Errorf("version 3 with no atime: got %v, want ErrMalformed", err)
	}
	b, err = EncodeTree(fixtureAtimeTree())
	if err != nil {
		t.Fatal(err)
	}
	v2 := bytes.Clone(b)
	v2[len(treeMagic)] = SpecialTreeVersion
	if _, err := DecodeTree(v2); err == nil {
		t.Error("an atime tree decoded as version 2")
	}
	v4 := bytes.Clone(b)
	v4[len(treeMagic)] = BtimeTreeVersion
	if _, err := DecodeTree(v4); err == nil {
		t.Error("an atime tree decoded as version 4")
	}
	checkRoundTrip(t, b, fixtureAtimeTree())
}

// TestAtime: an entry with no access time recorded reads as its mtime.
func TestAtime(t *testing.T) {
	e := Entry{MtimeNs: 5}
	if e.Atime() != 5 {
		t.Errorf("unrecorded: %d", e.Atime())
	}
	e.AtimeNs = 7
	if e.Atime() != 7 {
		t.Errorf("recorded: %d", e.Atime())
	}
	a := DirAttr{MtimeNs: 5}
	if a.Atime() != 5 {
		t.Errorf("own, unrecorded: %d", a.Atime())
	}
}

// TestDiffTimes: an access or birth time that changed is a change Diff
// reports.
func TestDiffTimes(t *testing.T) {
	for _, tc := range []struct {
		what string
		set  func(*Entry)
	}{
		{"atime", func(e *Entry) { e.AtimeNs = fixedNs + 1 }},
		{"btime", func(e *Entry) { e.BtimeNs = fixedNs - 1 }},
	} {
		s := newStore()
		ctx := context.Background()
		old := map[string]Entry{"f": fileEntry("f", 1), "g": fileEntry("g", 1)}
		newer := map[string]Entry{"f": fileEntry("f", 1), "g": fileEntry("g", 1)}
		f := newer["f"]
		tc.set(&f)
		newer["f"] = f
		a, err := BuildTree(ctx, s, old)
		if err != nil {
			t.Fatal(err)
		}
		b, err := BuildTree(ctx, s, newer)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		err = Diff(ctx, s, a, b, func(p string, o, n *Entry) error {
			got = append(got, p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, []string{"f"}) {
			t.Errorf("%s: diff %v, want [f]", tc.what, got)
		}
	}
}
