package manifest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/homefs/homefs/cas"
)

func TestTreeRoundTrip(t *testing.T) {
	for _, tree := range []*Tree{{}, fixtureTree(), benchTree(1000), selfTree()} {
		b, err := EncodeTree(tree)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeTree(b)
		if err != nil {
			t.Fatal(err)
		}
		if !entriesSliceEqual(got.Entries, tree.Entries) {
			t.Fatalf("round trip of %d entries changed them", len(tree.Entries))
		}
		if !reflect.DeepEqual(got.Self, tree.Self) {
			t.Fatalf("round trip changed the own attributes: %+v, want %+v", got.Self, tree.Self)
		}
		again, err := EncodeTree(got)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs (err %v)", err)
		}
	}
}

func TestDecodeTreeDoesNotAlias(t *testing.T) {
	b, _ := EncodeTree(fixtureTree())
	tree, err := DecodeTree(b)
	if err != nil {
		t.Fatal(err)
	}
	clear(b)
	if err := tree.Validate(); err != nil || tree.Entries[0].Name != ".hidden" {
		t.Fatalf("decoded tree changed with its input: %v", err)
	}
	// Inline chunk slices must not share capacity: appending to one entry's
	// chunks must not overwrite the next entry's.
	for i := range tree.Entries {
		if c := tree.Entries[i].Chunks; len(c) != cap(c) {
			t.Fatalf("entry %d: chunks len %d cap %d", i, len(c), cap(c))
		}
	}
}

func TestEncodeTreeValidates(t *testing.T) {
	_, err := EncodeTree(&Tree{Entries: []Entry{fileEntry("b", 0), fileEntry("a", 0)}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeTreeRejects(t *testing.T) {
	good, err := EncodeTree(&Tree{Entries: []Entry{fileEntry("a", 1)}})
	if err != nil {
		t.Fatal(err)
	}
	mut := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	// Offsets in good: header 0-4, count 5, nameLen 6, name 7, kind 8, mode 9-10.
	for _, tc := range []struct {
		what string
		b    []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"bad magic", mut(func(b []byte) []byte { b[0] = 'X'; return b }), ErrMalformed},
		{"index magic", mut(func(b []byte) []byte { copy(b, indexMagic); return b }), ErrMalformed},
		{"version 0", mut(func(b []byte) []byte { b[4] = 0; return b }), ErrUnsupportedVersion},
		{"version 5", mut(func(b []byte) []byte { b[4] = 5; return b }), ErrUnsupportedVersion},
		{"version 2 without special files", mut(func(b []byte) []byte { b[4] = SpecialTreeVersion; return b }), ErrMalformed},
		{"version 3 without atimes", mut(func(b []byte) []byte { b[4] = AtimeTreeVersion; return b }), ErrMalformed},
		{"version 4 without btimes", mut(func(b []byte) []byte { b[4] = BtimeTreeVersion; return b }), ErrMalformed},
		{"header only", good[:5], ErrMalformed},
		{"truncated", good[:len(good)-1], ErrMalformed},
		{"trailing byte", append(bytes.Clone(good), 0), ErrMalformed},
		{"count too high", mut(func(b []byte) []byte { b[5] = 2; return b }), ErrMalformed},
		{"count over limit", append(binary.AppendUvarint([]byte("HFST\x01"), MaxTreeEntries+1), make([]byte, 64)...), ErrMalformed},
		{"non-minimal count", append([]byte("HFST\x01\x81\x00"), good[6:]...), ErrMalformed},
		{"non-minimal zero count", []byte("HFST\x01\x80\x00"), ErrMalformed},
		{"varint overflow", append([]byte("HFST\x01"), bytes.Repeat([]byte{0xff}, 11)...), ErrMalformed},
		{"unknown kind", mut(func(b []byte) []byte { b[8] = 8; return b }), ErrInvalid},
		{"bad name", mut(func(b []byte) []byte { b[7] = '/'; return b }), ErrInvalidName},
		{"too large", make([]byte, MaxNodeSize+1), ErrTooLarge},
	} {
		_, err := DecodeTree(tc.b)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, err, tc.want)
		}
	}
	if _, err := DecodeTree(good); err != nil {
		t.Fatal(err)
	}
}

func TestEncodeTreeTooLarge(t *testing.T) {
	// 16 inline chunks per entry: 1000 entries are ~530 KB; 40000 exceed 16 MiB.
	n := 40000
	tree := &Tree{Entries: make([]Entry, n)}
	for i := range tree.Entries {
		tree.Entries[i] = fileEntry(benchName(i), MaxInlineChunks*ChunkSize)
	}
	if _, err := EncodeTree(tree); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
}

func TestEmptyTreeRef(t *testing.T) {
	b, _ := EncodeTree(&Tree{})
	if EmptyTreeRef() != cas.Sum(b) || string(b) != "HFST\x01\x00" {
		t.Fatalf("empty tree %q", b)
	}
}

func TestEncodedEntryLen(t *testing.T) {
	for _, tree := range []*Tree{fixtureTree(), fixtureSpecialTree(), fixtureAtimeTree(), fixtureBtimeTree(), benchTree(200)} {
		for i := range tree.Entries {
			e := &tree.Entries[i]
			e.UID, e.MtimeNs = 1<<31+uint32(i), -int64(i)<<40
			for v := byte(FormatVersion); v <= BtimeTreeVersion; v++ {
				l := layoutOf(v)
				if got, want := encodedEntryLen(e, l), len(appendEntry(nil, e, l)); got != want {
					t.Fatalf("entry %q (version %d): encodedEntryLen %d, encoded %d", e.Name, v, got, want)
				}
			}
		}
	}
}

func selfTree() *Tree {
	return &Tree{Entries: []Entry{fileEntry("a", 1)}, Self: &DirAttr{Mode: 0o1777, UID: 7, GID: 8, MtimeNs: -5, CtimeNs: 9, Xattrs: []Xattr{{Name: "user.a", Value: []byte("1")}}}}
}

// TestTreeSelf checks a tree's own attributes (TestTreeRoundTrip has them
// round-trip): they are validated and have one encoding.
func TestTreeSelf(t *testing.T) {
	tree := selfTree()
	b, err := EncodeTree(tree)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := EncodeTree(&Tree{Entries: tree.Entries})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(plain, b) || !bytes.HasPrefix(b, plain) {
		t.Fatal("own attributes must follow the entries, and only when set")
	}
	for _, tc := range []struct {
		what string
		tree *Tree
	}{
		{"mode bits", &Tree{Self: &DirAttr{Mode: 0o40755}}},
		{"unsorted xattrs", &Tree{Self: &DirAttr{Xattrs: []Xattr{{Name: "user.b"}, {Name: "user.a"}}}}},
		{"empty xattr name", &Tree{Self: &DirAttr{Xattrs: []Xattr{{Name: ""}}}}},
	} {
		if _, err := EncodeTree(tc.tree); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: got %v, want ErrInvalid", tc.what, err)
		}
	}
	for _, tc := range []struct {
		what string
		b    []byte
		want error
	}{
		{"other marker", append(bytes.Clone(plain), 2), ErrMalformed},
		{"marker alone", append(bytes.Clone(plain), 1), ErrMalformed},
		{"truncated", b[:len(b)-1], ErrMalformed},
		{"trailing byte", append(bytes.Clone(b), 0), ErrMalformed},
		{"bad mode", append(bytes.Clone(plain), 1, 0x80, 0x80, 0x04, 0, 0, 0, 0, 0), ErrInvalid},
	} {
		if _, err := DecodeTree(tc.b); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, err, tc.want)
		}
	}
}
