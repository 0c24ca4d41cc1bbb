package manifest

import (
	"bytes"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
)

// addGolden seeds f with a golden file, if present.
func addGolden(f *testing.F, name string) {
	b, err := os.ReadFile(filepath.Join(goldenDir, name))
	if err != nil {
		f.Logf("seed %s: %v", name, err)
		return
	}
	f.Add(b)
}

func FuzzDecodeTree(f *testing.F) {
	addGolden(f, "tree.bin")
	addGolden(f, "tree-root.bin")
	addGolden(f, "tree-special.bin")
	addGolden(f, "tree-atime.bin")
	addGolden(f, "tree-btime.bin")
	for _, t := range []*Tree{{}, benchTree(60), {Self: &DirAttr{Mode: 0o755}}} {
		b, _ := EncodeTree(t)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tree, err := DecodeTree(b)
		if err != nil {
			return
		}
		again, err := EncodeTree(tree)
		if err != nil {
			t.Fatalf("decoded tree does not encode: %v", err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("decode accepted a non-canonical encoding:\n%x\n%x", b, again)
		}
	})
}

func FuzzDecodeIndex(f *testing.F) {
	addGolden(f, "index.bin")
	b, _ := EncodeIndex(2, []cas.Ref{fakeRef("a"), fakeRef("b"), fakeRef("c")})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		depth, refs, err := DecodeIndex(b)
		if err != nil {
			return
		}
		again, err := EncodeIndex(depth, refs)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("round trip: %v\n%x\n%x", err, b, again)
		}
	})
}

func FuzzDecodeSnapshot(f *testing.F) {
	addGolden(f, "snapshot.json")
	addGolden(f, "snapshot-layout.json")
	b, _ := EncodeSnapshot(&Snapshot{Version: FormatVersion, Session: "s", Root: fakeRef("r")})
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeSnapshot(b)
		if err != nil {
			return
		}
		again, err := EncodeSnapshot(s)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("round trip: %v\n%s\n%s", err, b, again)
		}
	})
}

func FuzzValidatePath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "/a", "a//b", "a/../b", `a\b`, ".config/x", "a/", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if ValidatePath(p) != nil {
			return
		}
		// A valid path is clean, relative, and made of valid names.
		if path.Clean(p) != p || path.IsAbs(p) || strings.ContainsAny(p, "\\\x00") || len(p) > MaxPathLen {
			t.Fatalf("accepted %q", p)
		}
		for _, seg := range strings.Split(p, "/") {
			if ValidateName(seg) != nil {
				t.Fatalf("accepted %q with segment %q", p, seg)
			}
		}
	})
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"a", ".", "..", "...", "a/b", `a\b`, "", "\x00", strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidateName(name)
		bad := name == "" || name == "." || name == ".." || len(name) > MaxNameLen || strings.ContainsAny(name, "/\x00")
		if bad != (err != nil) {
			t.Fatalf("ValidateName(%q) = %v", name, err)
		}
		// A valid name without backslash is also a valid one-segment path.
		if err == nil && !strings.Contains(name, `\`) && ValidatePath(name) != nil {
			t.Fatalf("name %q is not a valid path", name)
		}
	})
}

func FuzzValidateSessionName(f *testing.F) {
	for _, s := range []string{"main", ".x", "-x", "a b", "a.b-c_d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateSessionName(s) != nil {
			return
		}
		// A valid session name is also a valid entry name and path.
		if ValidatePath(s) != nil || strings.HasPrefix(s, ".") || strings.HasPrefix(s, "-") {
			t.Fatalf("accepted %q", s)
		}
	})
}

// FuzzChunkLen: the lengths of a file's chunks add up to its size, every
// chunk but the last is full, and CheckChunk accepts exactly ChunkLen.
func FuzzChunkLen(f *testing.F) {
	for _, size := range []int64{0, 1, ChunkSize - 1, ChunkSize, ChunkSize + 1, 150000, 262144} {
		f.Add(size, 2)
	}
	f.Fuzz(func(t *testing.T, size int64, i int) {
		size = max(size, 0) % (1 << 40)
		n := ChunkCount(size)
		if i >= 0 && i < n {
			l := ChunkLen(size, i)
			if l <= 0 || l > ChunkSize || i < n-1 && l != ChunkSize {
				t.Fatalf("ChunkLen(%d, %d) = %d", size, i, l)
			}
			if int64(n-1)*ChunkSize+int64(ChunkLen(size, n-1)) != size {
				t.Fatalf("size %d: chunk lengths do not add up", size)
			}
		} else if ChunkLen(size, i) != 0 {
			t.Fatalf("ChunkLen(%d, %d) past the end = %d", size, i, ChunkLen(size, i))
		}
		l := ChunkLen(size, i)
		if CheckChunk(size, i, l) != nil || CheckChunk(size, i, l+1) == nil {
			t.Fatalf("CheckChunk(%d, %d) disagrees with ChunkLen %d", size, i, l)
		}
	})
}
