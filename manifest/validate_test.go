package manifest

import (
	"errors"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
)

func TestValidateName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"a", true},
		{"file.txt", true},
		{".hidden", true},
		{"...", true},
		{`back\slash`, true},
		{"sp ace", true},
		{"\xff\xfe", true}, // not UTF-8: still a POSIX name
		{"Ωmega", true},
		{strings.Repeat("x", MaxNameLen), true},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"/", false},
		{"nul\x00", false},
		{strings.Repeat("x", MaxNameLen+1), false},
	} {
		err := ValidateName(tc.name)
		if tc.ok != (err == nil) {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && (!errors.Is(err, ErrInvalidName) || !errors.Is(err, ErrInvalid)) {
			t.Errorf("ValidateName(%q) = %v, not ErrInvalidName", tc.name, err)
		}
	}
}

func TestValidatePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"a", true},
		{"a/b/c.txt", true},
		{".config/app", true},
		{"a/.../b", true},
		{"", false},
		{"/", false},
		{"/etc/passwd", false},
		{"a/", false},
		{"a//b", false},
		{"./a", false},
		{"a/./b", false},
		{"../a", false},
		{"a/..", false},
		{`a\b`, false},
		{"a\x00b", false},
		{strings.Repeat("x", MaxNameLen+1), false},
		{strings.Repeat("abcdefg/", MaxPathLen/8) + "x", false},
		{strings.Repeat("abcdefg/", MaxPathLen/8-1) + "1234567", true}, // exactly MaxPathLen
	} {
		err := ValidatePath(tc.path)
		if tc.ok != (err == nil) {
			t.Errorf("ValidatePath(%.60q) = %v, want ok=%v", tc.path, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidPath) {
			t.Errorf("ValidatePath(%.60q) = %v, not ErrInvalidPath", tc.path, err)
		}
	}
}

func TestValidateSessionName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"main", true},
		{"work-2024.01_b", true},
		{"A9", true},
		{"x.", true},
		{strings.Repeat("s", MaxSessionNameLen), true},
		{"", false},
		{".hidden", false},
		{"-rf", false},
		{"a b", false},
		{"a/b", false},
		{"ümlaut", false},
		{"a:b", false},
		{strings.Repeat("s", MaxSessionNameLen+1), false},
	} {
		err := ValidateSessionName(tc.name)
		if tc.ok != (err == nil) {
			t.Errorf("ValidateSessionName(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidName) {
			t.Errorf("ValidateSessionName(%q) = %v, not ErrInvalidName", tc.name, err)
		}
	}
}

func TestChunkCount(t *testing.T) {
	for size, want := range map[int64]int{-1: 0, 0: 0, 1: 1, ChunkSize - 1: 1, ChunkSize: 1, ChunkSize + 1: 2, 1 << 30: 16384, 1<<63 - 1: 1 << 47} {
		if got := ChunkCount(size); got != want {
			t.Errorf("ChunkCount(%d) = %d, want %d", size, got, want)
		}
	}
}

// TestCheckChunk: the chunk-length rule. The cases are the ones a grown
// file meets: its short last chunk of 150000 bytes (18928) is right at
// that size and wrong once the file is 262144 bytes long.
func TestCheckChunk(t *testing.T) {
	const tail = 150000 - 2*ChunkSize // 18928
	for _, tc := range []struct {
		name string
		size int64
		i, n int
		ok   bool
	}{
		{"full middle chunk", 3 * ChunkSize, 1, ChunkSize, true},
		{"short middle chunk", 3 * ChunkSize, 1, ChunkSize - 1, false},
		{"long chunk", 3 * ChunkSize, 2, ChunkSize + 1, false},
		{"exact short last chunk", 150000, 2, tail, true},
		{"short last chunk of a grown file", 262144, 2, tail, false},
		{"grown file, the chunk stored again", 262144, 2, ChunkSize, true},
		{"last chunk too long after a shrink", 140000, 2, tail, false},
		{"full last chunk", 2 * ChunkSize, 1, ChunkSize, true},
		{"one-byte file", 1, 0, 1, true},
		{"empty chunk in a file", 10, 0, 0, false},
		{"past the end", 10, 1, 1, false},
		{"nothing past the end", 10, 1, 0, true},
		{"negative index", 10, -1, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckChunk(tc.size, tc.i, tc.n)
			if tc.ok != (err == nil) {
				t.Fatalf("CheckChunk(%d, %d, %d) = %v, want ok=%v", tc.size, tc.i, tc.n, err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Fatalf("CheckChunk: %v, not ErrInvalid", err)
			}
		})
	}
}

// entryCase is an entry and the error its Validate must return (nil:
// valid).
type entryCase struct {
	what string
	e    Entry
	want error
}

// entryCases are valid and invalid entries, most of them a valid entry of
// their kind with one thing changed.
func entryCases() []entryCase {
	ref := fakeRef("x")
	file := func(f func(e *Entry)) Entry {
		e := fileEntry("f", 2*ChunkSize)
		f(&e)
		return e
	}
	dir := func(f func(e *Entry)) Entry {
		e := Entry{Name: "d", Kind: KindDir, Mode: 0o755, Tree: ref}
		f(&e)
		return e
	}
	link := func(f func(e *Entry)) Entry {
		e := Entry{Name: "l", Kind: KindSymlink, Mode: 0o777, Target: "t", Size: 1}
		f(&e)
		return e
	}
	big := func(f func(e *Entry)) Entry {
		e := fileEntry("big", (MaxInlineChunks+1)*ChunkSize)
		f(&e)
		return e
	}
	return []entryCase{
		{"file", file(func(e *Entry) {}), nil},
		{"empty file", fileEntry("e", 0), nil},
		{"dir", dir(func(e *Entry) {}), nil},
		{"symlink", link(func(e *Entry) {}), nil},
		{"indexed file", big(func(e *Entry) {}), nil},
		{"hard link", file(func(e *Entry) { e.LinkID, e.Nlink = 1, 3 }), nil},
		{"hard-linked symlink", link(func(e *Entry) { e.LinkID, e.Nlink = 1, 2 }), nil},
		{"setuid sticky", file(func(e *Entry) { e.Mode = 0o7777 }), nil},
		{"xattrs", file(func(e *Entry) { e.Xattrs = []Xattr{{Name: "a"}, {Name: "b", Value: make([]byte, MaxXattrValueLen)}} }), nil},
		{"hole", file(func(e *Entry) { e.Chunks[0] = cas.Ref{} }), nil},
		{"max inline", fileEntry("m", MaxInlineChunks*ChunkSize), nil},
		{"depth 2", fileEntry("d2", (IndexFanout+1)*ChunkSize), nil},
		{"depth 1 full", fileEntry("d1", IndexFanout*ChunkSize), nil},
		{"negative time", file(func(e *Entry) { e.MtimeNs = -5 }), nil},

		{"bad name", file(func(e *Entry) { e.Name = ".." }), ErrInvalidName},
		{"unknown kind", file(func(e *Entry) { e.Kind = 9; e.Chunks = nil; e.Size = 0 }), ErrInvalid},
		{"zero kind", Entry{Name: "z"}, ErrInvalid},
		{"mode type bits", file(func(e *Entry) { e.Mode = 0o100644 }), ErrInvalid},
		{"link id without nlink", file(func(e *Entry) { e.LinkID = 1 }), ErrInvalid},
		{"nlink without link id", file(func(e *Entry) { e.Nlink = 1 }), ErrInvalid},
		{"negative size", file(func(e *Entry) { e.Size = -1; e.Chunks = nil }), ErrInvalid},
		{"too few chunks", file(func(e *Entry) { e.Size = 3 * ChunkSize }), ErrInvalid},
		{"too many chunks", file(func(e *Entry) { e.Size = 1 }), ErrInvalid},
		{"one byte over inline: index", fileEntry("x", MaxInlineChunks*ChunkSize+1), nil},
		{"inline chunks for big size", big(func(e *Entry) {
			e.Index, e.Depth = cas.Ref{}, 0
			e.Chunks = make([]cas.Ref, MaxInlineChunks+1)
		}), ErrInvalid},
		{"index with chunks", big(func(e *Entry) { e.Chunks = []cas.Ref{ref} }), ErrInvalid},
		{"index ref at depth 0", file(func(e *Entry) { e.Index = ref }), ErrInvalid},
		{"zero index", big(func(e *Entry) { e.Index = cas.Ref{} }), ErrInvalid},
		{"index for small file", file(func(e *Entry) { e.Chunks, e.Index, e.Depth = nil, ref, 1 }), ErrInvalid},
		{"index too deep", big(func(e *Entry) { e.Depth = 2 }), ErrInvalid},
		{"index depth over max", big(func(e *Entry) { e.Depth = MaxIndexDepth + 1 }), ErrInvalid},
		{"index too shallow", fileEntry("s", (IndexFanout+1)*ChunkSize), nil},
		{"index too shallow, depth 1", func() Entry {
			e := fileEntry("s", (IndexFanout+1)*ChunkSize)
			e.Depth = 1
			return e
		}(), ErrInvalid},
		{"file with tree", file(func(e *Entry) { e.Tree = ref }), ErrInvalid},
		{"file with target", file(func(e *Entry) { e.Target = "t" }), ErrInvalid},
		{"dir without tree", dir(func(e *Entry) { e.Tree = cas.Ref{} }), ErrInvalid},
		{"dir with size", dir(func(e *Entry) { e.Size = 4096 }), ErrInvalid},
		{"dir with chunks", dir(func(e *Entry) { e.Chunks = []cas.Ref{ref} }), ErrInvalid},
		{"dir with index", dir(func(e *Entry) { e.Index, e.Depth = ref, 1 }), ErrInvalid},
		{"dir with target", dir(func(e *Entry) { e.Target = "t" }), ErrInvalid},
		{"dir hard link", dir(func(e *Entry) { e.LinkID, e.Nlink = 1, 2 }), ErrInvalid},
		{"symlink empty target", link(func(e *Entry) { e.Target, e.Size = "", 0 }), ErrInvalid},
		{"symlink size mismatch", link(func(e *Entry) { e.Size = 5 }), ErrInvalid},
		{"symlink target too long", link(func(e *Entry) { e.Target = strings.Repeat("t", MaxPathLen+1); e.Size = int64(len(e.Target)) }), ErrInvalid},
		{"symlink target max", link(func(e *Entry) { e.Target = strings.Repeat("t", MaxPathLen); e.Size = int64(len(e.Target)) }), nil},
		{"symlink target NUL", link(func(e *Entry) { e.Target = "a\x00b"; e.Size = 3 }), ErrInvalid},
		{"symlink with chunks", link(func(e *Entry) { e.Chunks = []cas.Ref{ref} }), ErrInvalid},
		{"symlink with tree", link(func(e *Entry) { e.Tree = ref }), ErrInvalid},
		{"xattr empty name", file(func(e *Entry) { e.Xattrs = []Xattr{{Name: ""}} }), ErrInvalid},
		{"xattr long name", file(func(e *Entry) { e.Xattrs = []Xattr{{Name: strings.Repeat("n", MaxXattrNameLen+1)}} }), ErrInvalid},
		{"xattr NUL name", file(func(e *Entry) { e.Xattrs = []Xattr{{Name: "a\x00"}} }), ErrInvalid},
		{"xattr big value", file(func(e *Entry) { e.Xattrs = []Xattr{{Name: "a", Value: make([]byte, MaxXattrValueLen+1)}} }), ErrInvalid},
		{"xattr unsorted", file(func(e *Entry) { e.Xattrs = []Xattr{{Name: "b"}, {Name: "a"}} }), ErrInvalid},
		{"xattr duplicate", file(func(e *Entry) { e.Xattrs = []Xattr{{Name: "a"}, {Name: "a"}} }), ErrInvalid},
	}
}

func TestEntryValidate(t *testing.T) {
	for _, tc := range entryCases() {
		err := tc.e.Validate()
		switch {
		case tc.want == nil && err != nil:
			t.Errorf("%s: %v", tc.what, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s: got %v, want %v", tc.what, err, tc.want)
		case err != nil && !strings.Contains(err.Error(), "entry"):
			t.Errorf("%s: error %q does not name the entry", tc.what, err)
		}
	}
}

func TestTreeValidate(t *testing.T) {
	e := func(name string) Entry { return fileEntry(name, 0) }
	for _, tc := range []struct {
		what string
		t    Tree
		want error
	}{
		{"empty", Tree{}, nil},
		{"sorted", Tree{Entries: []Entry{e("A"), e("B"), e("a"), e("b"), e("\xff")}}, nil},
		{"bytewise, not by rune", Tree{Entries: []Entry{e("z"), e("é")}}, nil},
		{"prefix first", Tree{Entries: []Entry{e("a"), e("a.b"), e("ab")}}, nil},
		{"unsorted", Tree{Entries: []Entry{e("b"), e("a")}}, ErrInvalid},
		{"duplicate", Tree{Entries: []Entry{e("a"), e("a")}}, ErrInvalid},
		{"bad entry", Tree{Entries: []Entry{e("a"), e("")}}, ErrInvalidName},
		{"too many", Tree{Entries: make([]Entry, MaxTreeEntries+1)}, ErrTooLarge},
	} {
		err := tc.t.Validate()
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, err, tc.want)
		}
	}
}
