package remote

import (
	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// nodeRefs decodes a tree or index node (kind) and calls fn, in order,
// with every ref it names and that ref's kind: the tree node of a
// directory, the index node of a large file or the nodes below an index
// node, or a chunk. Zero chunk refs (holes) are left out. A node that does
// not decode is the decoder's error, for the caller to wrap.
func nodeRefs(kind manifest.RefKind, data []byte, fn func(ref cas.Ref, kind manifest.RefKind)) error {
	if kind == manifest.TreeNode {
		t, err := manifest.DecodeTree(data)
		if err != nil {
			return err
		}
		for i := range t.Entries {
			e := &t.Entries[i]
			switch {
			case e.Kind == manifest.KindDir:
				fn(e.Tree, manifest.TreeNode)
			case e.Kind == manifest.KindFile && e.Depth == 0:
				chunkRefs(e.Chunks, fn)
			case e.Kind == manifest.KindFile:
				fn(e.Index, manifest.IndexNode)
			}
		}
		return nil
	}
	depth, refs, err := manifest.DecodeIndex(data)
	if err != nil {
		return err
	}
	if depth == 1 {
		chunkRefs(refs, fn)
		return nil
	}
	for _, c := range refs {
		fn(c, manifest.IndexNode)
	}
	return nil
}

func chunkRefs(refs []cas.Ref, fn func(cas.Ref, manifest.RefKind)) {
	for _, c := range refs {
		if !c.IsZero() {
			fn(c, manifest.Chunk)
		}
	}
}
