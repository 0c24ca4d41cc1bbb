package manifest

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/homefs/homefs/cas"
)

// countingStore counts the bytes put and got (each hashed once by the
// store), for benchmarks and O(changes) checks.
type countingStore struct {
	*cas.MemoryStore
	puts, putBytes, gets, getBytes atomic.Int64
}

func newStore() *countingStore { return &countingStore{MemoryStore: cas.NewMemory()} }

func (s *countingStore) Put(ctx context.Context, b []byte) (cas.Ref, error) {
	s.puts.Add(1)
	s.putBytes.Add(int64(len(b)))
	return s.MemoryStore.Put(ctx, b)
}

func (s *countingStore) Get(ctx context.Context, r cas.Ref) ([]byte, error) {
	s.gets.Add(1)
	b, err := s.MemoryStore.Get(ctx, r)
	s.getBytes.Add(int64(len(b)))
	return b, err
}

func (s *countingStore) resetCounts() {
	s.puts.Store(0)
	s.putBytes.Store(0)
	s.gets.Store(0)
	s.getBytes.Store(0)
}

// fakeRef returns a fixed ref derived from a label.
func fakeRef(format string, args ...any) cas.Ref {
	return cas.Sum(fmt.Appendf(nil, format, args...))
}

// fixedNs is the fixtures' clock: 2024-01-02T03:04:05.000000006Z.
const fixedNs int64 = 1704164645_000000006

func fileEntry(name string, size int64) Entry {
	e := Entry{Name: name, Kind: KindFile, Mode: 0o644, UID: 1000, GID: 1000, Size: size, MtimeNs: fixedNs, CtimeNs: fixedNs}
	n := ChunkCount(size)
	if n <= MaxInlineChunks {
		for i := range n {
			e.Chunks = append(e.Chunks, fakeRef("%s/chunk/%d", name, i))
		}
	} else {
		e.Depth = indexDepth(n)
		e.Index = fakeRef("%s/index", name)
	}
	return e
}

// fixtureTree covers every kind and optional field.
func fixtureTree() *Tree {
	big := fileEntry("big.bin", 3*IndexFanout*ChunkSize+5)
	sparse := fileEntry("sparse", 3*ChunkSize)
	sparse.Chunks[1] = cas.Ref{}
	linked := fileEntry("hard-1", 10)
	linked.LinkID, linked.Nlink = 7, 2
	linked2 := linked
	linked2.Name = "hard-2"
	attrs := fileEntry("with-xattrs", 0)
	attrs.Xattrs = []Xattr{{Name: "user.a", Value: []byte("1")}, {Name: "user.empty"}, {Name: "user.z", Value: []byte{0, 0xff}}}
	attrs.MtimeNs, attrs.CtimeNs = -1, 0
	back := fileEntry(`back\slash`, 1)
	back.Mode = 0o4755
	t := &Tree{Entries: []Entry{
		{Name: ".hidden", Kind: KindDir, Mode: 0o700, MtimeNs: fixedNs, CtimeNs: fixedNs, Tree: EmptyTreeRef()},
		{Name: "Zeta", Kind: KindSymlink, Mode: 0o777, Size: 12, Target: "../elsewhere", MtimeNs: fixedNs, CtimeNs: fixedNs},
		back,
		big,
		fileEntry("empty", 0),
		linked,
		linked2,
		sparse,
		{Name: "src", Kind: KindDir, Mode: 0o755, UID: 1000, GID: 1000, MtimeNs: fixedNs, CtimeNs: fixedNs, Tree: fakeRef("src tree")},
		attrs,
		fileEntry("Ωmega.txt", ChunkSize),
	}}
	return t
}

// fixtureSpecialTree is a directory holding each kind of special file
// beside a file, two of them hard links of one fifo.
func fixtureSpecialTree() *Tree {
	special := func(name string, k Kind, rdev uint32) Entry {
		return Entry{Name: name, Kind: k, Mode: 0o640, UID: 1000, GID: 100, MtimeNs: fixedNs, CtimeNs: fixedNs + 1, Rdev: rdev}
	}
	fifo := special("fifo", KindFifo, 0)
	fifo.LinkID, fifo.Nlink = 9, 2
	fifo2 := fifo
	fifo2.Name = "fifo-link"
	null := special("null", KindCharDev, 1<<8|3) // 1:3
	null.Mode = 0o666
	sda := special("sda1", KindBlockDev, 8<<8|1|0x123<<12) // 8:1 plus a minor over 255
	sock := special("sock", KindSocket, 0)
	sock.Mode = 0o755
	sock.Xattrs = []Xattr{{Name: "user.who", Value: []byte("git fsmonitor")}}
	return &Tree{Entries: []Entry{
		fileEntry("a-file", 1),
		fifo,
		fifo2,
		null,
		sda,
		sock,
		special("whiteout", KindCharDev, 0),
	}}
}

// fixtureAtimeTree records access times: a file read since its last
// change, one never read (no atime recorded), a fifo, and the root's own.
func fixtureAtimeTree() *Tree {
	read := fileEntry("read", 1)
	read.AtimeNs = fixedNs + 3600e9
	return &Tree{
		Entries: []Entry{
			{Name: "fifo", Kind: KindFifo, Mode: 0o600, MtimeNs: fixedNs, CtimeNs: fixedNs, AtimeNs: -1},
			read,
			fileEntry("unread", 2),
		},
		Self: &DirAttr{Mode: 0o755, MtimeNs: fixedNs, CtimeNs: fixedNs, AtimeNs: fixedNs + 86400e9},
	}
}

// fixtureBtimeTree records birth times: a file made here, one with none
// known (from an older tree), a fifo with an atime too, a directory, and
// the root's own.
func fixtureBtimeTree() *Tree {
	made := fileEntry("made", 1)
	made.BtimeNs = fixedNs - 7200e9
	return &Tree{
		Entries: []Entry{
			{Name: "dir", Kind: KindDir, Mode: 0o700, MtimeNs: fixedNs, CtimeNs: fixedNs, BtimeNs: fixedNs - 1, Tree: EmptyTreeRef()},
			{Name: "fifo", Kind: KindFifo, Mode: 0o600, MtimeNs: fixedNs, CtimeNs: fixedNs, AtimeNs: fixedNs + 5, BtimeNs: -1},
			made,
			fileEntry("old", 2),
		},
		Self: &DirAttr{Mode: 0o755, MtimeNs: fixedNs, CtimeNs: fixedNs, BtimeNs: fixedNs - 86400e9},
	}
}

// encodedVersion is the format version EncodeTree gives tree.
func encodedVersion(t *testing.T, tree *Tree) byte {
	t.Helper()
	b, err := EncodeTree(tree)
	if err != nil {
		t.Fatal(err)
	}
	return b[len(treeMagic)]
}

// checkRoundTrip checks that b decodes to want.
func checkRoundTrip(t *testing.T, b []byte, want *Tree) {
	t.Helper()
	got, err := DecodeTree(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("round trip:\n%s\nwant\n%s", dumpTree(got), dumpTree(want))
	}
}

// fixtureFiles is a small home directory for BuildTree, Walk and Diff.
func fixtureFiles() map[string]Entry {
	files := map[string]Entry{}
	add := func(p string, e Entry) { files[p] = e }
	for _, p := range []string{".bashrc", "notes.txt", "src/main.go", "src/lib/a.go", "src/lib/b.go", "docs/deep/er/still/file.md"} {
		add(p, fileEntry(p, int64(len(p))*1000))
	}
	add("big/video.bin", fileEntry("video", (MaxInlineChunks+3)*ChunkSize))
	add("link", Entry{Kind: KindSymlink, Mode: 0o777, Size: 8, Target: "src/lib/", MtimeNs: fixedNs, CtimeNs: fixedNs})
	add("src", Entry{Kind: KindDir, Mode: 0o750, UID: 1000, GID: 1000, MtimeNs: fixedNs, CtimeNs: fixedNs})
	add("empty-dir", Entry{Kind: KindDir, Mode: 0o755, MtimeNs: fixedNs, CtimeNs: fixedNs})
	return files
}

// storeFixtureFiles builds fixtureFiles into s, storing real index nodes
// for large files so the Merkle structure is complete.
func storeFixtureFiles(t testing.TB, s *countingStore) cas.Ref {
	t.Helper()
	ctx := context.Background()
	files := fixtureFiles()
	for p, e := range files {
		if e.Kind != KindFile || e.Depth == 0 {
			continue
		}
		c := NewChunkList()
		for i := range ChunkCount(e.Size) {
			c.Set(i, fakeRef("%s/chunk/%d", p, i))
		}
		c.Set(1, cas.Ref{}) // a hole
		chunks, index, depth, err := c.Store(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		e.Chunks, e.Index, e.Depth = chunks, index, depth
		files[p] = e
	}
	if _, err := PutTree(ctx, s, &Tree{}); err != nil {
		t.Fatal(err)
	}
	root, err := BuildTree(ctx, s, files)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// dumpTree is the human-readable form of a tree node used in golden files.
func dumpTree(t *Tree) string {
	var b strings.Builder
	for _, e := range t.Entries {
		fmt.Fprintf(&b, "%-8v %q mode=%04o uid=%d gid=%d mtime=%d ctime=%d", e.Kind, e.Name, e.Mode, e.UID, e.GID, e.MtimeNs, e.CtimeNs)
		if e.AtimeNs != 0 {
			fmt.Fprintf(&b, " atime=%d", e.AtimeNs)
		}
		if e.BtimeNs != 0 {
			fmt.Fprintf(&b, " btime=%d", e.BtimeNs)
		}
		switch e.Kind {
		case KindFile:
			fmt.Fprintf(&b, " size=%d", e.Size)
			if e.Depth > 0 {
				fmt.Fprintf(&b, " index=%s depth=%d", e.Index.Short(), e.Depth)
			}
			for _, c := range e.Chunks {
				fmt.Fprintf(&b, " %s", c.Short())
			}
		case KindDir:
			fmt.Fprintf(&b, " tree=%s", e.Tree.Short())
		case KindSymlink:
			fmt.Fprintf(&b, " -> %q", e.Target)
		case KindCharDev, KindBlockDev:
			fmt.Fprintf(&b, " rdev=%#x", e.Rdev)
		}
		for _, x := range e.Xattrs {
			fmt.Fprintf(&b, " xattr:%s=%q", x.Name, x.Value)
		}
		if e.LinkID != 0 {
			fmt.Fprintf(&b, " link=%d nlink=%d", e.LinkID, e.Nlink)
		}
		b.WriteByte('\n')
	}
	if a := t.Self; a != nil {
		fmt.Fprintf(&b, "self mode=%04o uid=%d gid=%d mtime=%d ctime=%d", a.Mode, a.UID, a.GID, a.MtimeNs, a.CtimeNs)
		if a.AtimeNs != 0 {
			fmt.Fprintf(&b, " atime=%d", a.AtimeNs)
		}
		if a.BtimeNs != 0 {
			fmt.Fprintf(&b, " btime=%d", a.BtimeNs)
		}
		b.WriteByte('\n')
	}
	return b.String()
}
