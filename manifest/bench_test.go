package manifest

import (
	"fmt"
)

// benchName gives names that sort in index order.
func benchName(i int) string { return fmt.Sprintf("file-%07d.txt", i) }

// benchTree is a directory of n small files, one or two chunks each, with
// a few subdirectories and symlinks mixed in.
func benchTree(n int) *Tree {
	t := &Tree{Entries: make([]Entry, n)}
	for i := range t.Entries {
		e := fileEntry(benchName(i), int64(1000+i%(2*ChunkSize)))
		e.MtimeNs += int64(i) * 1e9
		switch i % 50 {
		case 7:
			e = Entry{Name: e.Name, Kind: KindDir, Mode: 0o755, MtimeNs: e.MtimeNs, CtimeNs: e.CtimeNs, Tree: fakeRef("dir %d", i)}
		case 13:
			e = Entry{Name: e.Name, Kind: KindSymlink, Mode: 0o777, MtimeNs: e.MtimeNs, CtimeNs: e.CtimeNs, Target: "../target/" + e.Name}
			e.Size = int64(len(e.Target))
		}
		t.Entries[i] = e
	}
	return t
}
