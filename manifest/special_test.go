package manifest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
)

// TestValidateSpecial: special files hold attributes and, for device
// nodes, a device number; nothing else.
func TestValidateSpecial(t *testing.T) {
	base := Entry{Name: "x", Mode: 0o644, MtimeNs: fixedNs, CtimeNs: fixedNs}
	for _, tc := range []struct {
		what string
		edit func(e *Entry)
		ok   bool
	}{
		{"fifo", func(e *Entry) { e.Kind = KindFifo }, true},
		{"socket", func(e *Entry) { e.Kind = KindSocket }, true},
		{"char device", func(e *Entry) { e.Kind, e.Rdev = KindCharDev, 1<<8|3 }, true},
		{"block device 0:0", func(e *Entry) { e.Kind = KindBlockDev }, true},
		{"hard-linked fifo", func(e *Entry) { e.Kind, e.LinkID, e.Nlink = KindFifo, 3, 2 }, true},
		{"fifo with rdev", func(e *Entry) { e.Kind, e.Rdev = KindFifo, 1 }, false},
		{"socket with rdev", func(e *Entry) { e.Kind, e.Rdev = KindSocket, 1 }, false},
		{"file with rdev", func(e *Entry) { e.Kind, e.Rdev = KindFile, 1 }, false},
		{"device with size", func(e *Entry) { e.Kind, e.Size = KindCharDev, 1 }, false},
		{"fifo with chunks", func(e *Entry) { e.Kind, e.Chunks = KindFifo, fixtureIndex()[:1] }, false},
		{"socket with a target", func(e *Entry) { e.Kind, e.Target = KindSocket, "t" }, false},
		{"device with a tree", func(e *Entry) { e.Kind, e.Tree = KindBlockDev, EmptyTreeRef() }, false},
		{"type bits in mode", func(e *Entry) { e.Kind, e.Mode = KindFifo, 0o10644 }, false},
		{"kind 8", func(e *Entry) { e.Kind = 8 }, false},
	} {
		e := base
		tc.edit(&e)
		err := e.Validate()
		if tc.ok != (err == nil) {
			t.Errorf("%s: Validate = %v, want ok=%v", tc.what, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v is not ErrInvalid", tc.what, err)
		}
	}
}

// TestSpecialTreeVersion: a tree holding a special file is version 2 and
// only version 2; every other tree keeps version 1 and its bytes.
func TestSpecialTreeVersion(t *testing.T) {
	b, err := EncodeTree(fixtureSpecialTree())
	if err != nil {
		t.Fatal(err)
	}
	if b[len(treeMagic)] != SpecialTreeVersion {
		t.Fatalf("version %d", b[len(treeMagic)])
	}
	v1 := bytes.Clone(b)
	v1[len(treeMagic)] = FormatVersion
	if _, err := DecodeTree(v1); !errors.Is(err, ErrMalformed) {
		t.Errorf("special files in a version 1 tree: got %v, want ErrMalformed", err)
	}
	plain, err := EncodeTree(fixtureTree())
	if err != nil {
		t.Fatal(err)
	}
	if plain[len(treeMagic)] != FormatVersion {
		t.Errorf("a tree without special files is version %d", plain[len(treeMagic)])
	}
}

// TestDiffSpecial: a device number, and a fifo becoming a socket, are
// changes Diff reports.
func TestDiffSpecial(t *testing.T) {
	s := newStore()
	old := map[string]Entry{
		"dev":  {Kind: KindCharDev, Mode: 0o600, Rdev: 1<<8 | 3},
		"pipe": {Kind: KindFifo, Mode: 0o600},
		"same": {Kind: KindSocket, Mode: 0o700},
	}
	new := map[string]Entry{
		"dev":  {Kind: KindCharDev, Mode: 0o600, Rdev: 1<<8 | 5},
		"pipe": {Kind: KindSocket, Mode: 0o600},
		"same": {Kind: KindSocket, Mode: 0o700},
	}
	a, err := BuildTree(context.Background(), s, old)
	if err != nil {
		t.Fatal(err)
	}
	b, err := BuildTree(context.Background(), s, new)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	err = Diff(context.Background(), s, a, b, func(p string, o, n *Entry) error {
		got = append(got, p+":"+o.Kind.String()+">"+n.Kind.String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"dev:char>char", "pipe:fifo>socket"}; !slices.Equal(got, want) {
		t.Errorf("diff %v, want %v", got, want)
	}
}
