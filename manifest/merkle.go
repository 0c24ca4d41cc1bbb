package manifest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/homefs/homefs/cas"
)

// DefaultDirMode is the mode BuildTree gives directories it creates.
const DefaultDirMode = 0o755

// PutTree encodes t and stores it, returning its ref.
func PutTree(ctx context.Context, p cas.Putter, t *Tree) (cas.Ref, error) {
	b, err := EncodeTree(t)
	if err != nil {
		return cas.Ref{}, err
	}
	ref, err := p.Put(ctx, b)
	if err != nil {
		return cas.Ref{}, fmt.Errorf("manifest: put tree: %w", err)
	}
	return ref, nil
}

// GetTree loads and decodes the tree node ref.
func GetTree(ctx context.Context, g cas.Getter, ref cas.Ref) (*Tree, error) {
	b, err := g.Get(ctx, ref)
	if err != nil {
		return nil, fmt.Errorf("manifest: tree %s: %w", ref, err)
	}
	t, err := DecodeTree(b)
	if err != nil {
		return nil, fmt.Errorf("manifest: tree %s: %w", ref, err)
	}
	return t, nil
}

var emptyTree = sync.OnceValue(func() []byte {
	b, err := EncodeTree(&Tree{})
	if err != nil {
		panic(err)
	}
	return b
})

// EmptyTreeRef returns the ref of the empty directory's tree node. (It
// still has to be stored before use, like any node.)
func EmptyTreeRef() cas.Ref { return cas.Sum(emptyTree()) }

// joinPath joins a relative directory path and a name.
func joinPath(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Walk calls fn for every entry reachable from the root tree, depth first,
// each directory's entries in name order, a directory before its content.
// path is relative and slash-separated. If fn returns SkipSubtree for a
// directory, its content is skipped; any other error stops the walk.
func Walk(ctx context.Context, g cas.Getter, root cas.Ref, fn func(path string, e *Entry) error) error {
	return walk(ctx, g, root, "", fn)
}

func walk(ctx context.Context, g cas.Getter, ref cas.Ref, dir string, fn func(string, *Entry) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := GetTree(ctx, g, ref)
	if err != nil {
		return wrapPath(err, dir)
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		p := joinPath(dir, e.Name)
		err := fn(p, e)
		if errors.Is(err, SkipSubtree) {
			continue
		}
		if err != nil {
			return err
		}
		if e.Kind == KindDir {
			if err := walk(ctx, g, e.Tree, p, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func wrapPath(err error, path string) error {
	if err == nil || path == "" {
		return err
	}
	return fmt.Errorf("%s: %w", path, err)
}

// RefKind says what a reachable ref names.
type RefKind uint8

const (
	TreeNode  RefKind = iota + 1 // a tree node (directory)
	IndexNode                    // an index node of a large file
	Chunk                        // a file chunk
)

func (k RefKind) String() string {
	switch k {
	case TreeNode:
		return "tree"
	case IndexNode:
		return "index"
	case Chunk:
		return "chunk"
	}
	return fmt.Sprintf("RefKind(%d)", k)
}

// WalkRefs calls fn for every non-zero ref reachable from the root tree,
// each time it is reached (a ref shared by two files is reported twice),
// in Walk's order: a tree node before its entries, an index node before
// its children. path is the directory of a tree node ("" for the root) or
// the file of an index node or chunk. If fn returns SkipSubtree for a tree
// or index node, that node is neither read nor descended; a caller that
// keeps a set of seen refs uses this to visit each subtree once.
func WalkRefs(ctx context.Context, g cas.Getter, root cas.Ref, fn func(ref cas.Ref, kind RefKind, path string) error) error {
	if err := fn(root, TreeNode, ""); err != nil {
		if errors.Is(err, SkipSubtree) {
			return nil
		}
		return err
	}
	return walkRefs(ctx, g, root, "", fn)
}

func walkRefs(ctx context.Context, g cas.Getter, ref cas.Ref, dir string, fn func(cas.Ref, RefKind, string) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := GetTree(ctx, g, ref)
	if err != nil {
		return wrapPath(err, dir)
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		p := joinPath(dir, e.Name)
		switch e.Kind {
		case KindDir:
			if err := fn(e.Tree, TreeNode, p); errors.Is(err, SkipSubtree) {
				continue
			} else if err != nil {
				return err
			}
			if err := walkRefs(ctx, g, e.Tree, p, fn); err != nil {
				return err
			}
		case KindFile:
			if e.Depth == 0 {
				if err := chunkRefs(e.Chunks, p, fn); err != nil {
					return err
				}
				continue
			}
			if err := walkIndex(ctx, g, e.Index, e.Depth, p, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func chunkRefs(refs []cas.Ref, path string, fn func(cas.Ref, RefKind, string) error) error {
	for _, r := range refs {
		if r.IsZero() {
			continue
		}
		if err := fn(r, Chunk, path); err != nil && !errors.Is(err, SkipSubtree) {
			return err
		}
	}
	return nil
}

func walkIndex(ctx context.Context, g cas.Getter, ref cas.Ref, depth uint8, path string, fn func(cas.Ref, RefKind, string) error) error {
	if err := fn(ref, IndexNode, path); errors.Is(err, SkipSubtree) {
		return nil
	} else if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b, err := g.Get(ctx, ref)
	if err != nil {
		return fmt.Errorf("%s: manifest: index node %s: %w", path, ref, err)
	}
	d, refs, err := DecodeIndex(b)
	if err == nil && d != depth {
		err = errf(ErrInvalid, "index: depth %d, want %d", d, depth)
	}
	if err != nil {
		return fmt.Errorf("%s: manifest: index node %s: %w", path, ref, err)
	}
	if depth == 1 {
		return chunkRefs(refs, path, fn)
	}
	for _, r := range refs {
		if err := walkIndex(ctx, g, r, depth-1, path, fn); err != nil {
			return err
		}
	}
	return nil
}

// Diff calls fn for every path whose entry differs between the trees a and
// b (a zero ref is an empty tree): old is nil for an added path, new is nil
// for a removed one. Subtrees with equal refs are skipped, so the cost
// follows the changes, not the tree. The content of an added or removed
// directory is reported entry by entry after the directory itself; a
// directory present in both is reported only if its own attributes
// changed. Paths come in Walk's order. If fn returns SkipSubtree for a
// directory, its content is not compared.
func Diff(ctx context.Context, g cas.Getter, a, b cas.Ref, fn func(path string, old, new *Entry) error) error {
	return diffTrees(ctx, g, a, b, "", fn)
}

func loadOrEmpty(ctx context.Context, g cas.Getter, ref cas.Ref, dir string) ([]Entry, error) {
	if ref.IsZero() {
		return nil, nil
	}
	t, err := GetTree(ctx, g, ref)
	if err != nil {
		return nil, wrapPath(err, dir)
	}
	return t.Entries, nil
}

func diffTrees(ctx context.Context, g cas.Getter, a, b cas.Ref, dir string, fn func(string, *Entry, *Entry) error) error {
	if a == b {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	as, err := loadOrEmpty(ctx, g, a, dir)
	if err != nil {
		return err
	}
	bs, err := loadOrEmpty(ctx, g, b, dir)
	if err != nil {
		return err
	}
	for len(as) > 0 || len(bs) > 0 {
		var old, new *Entry
		switch {
		case len(bs) == 0 || len(as) > 0 && as[0].Name < bs[0].Name:
			old, as = &as[0], as[1:]
		case len(as) == 0 || bs[0].Name < as[0].Name:
			new, bs = &bs[0], bs[1:]
		default:
			old, new, as, bs = &as[0], &bs[0], as[1:], bs[1:]
		}
		name := new.nameOr(old)
		if err := diffEntries(ctx, g, joinPath(dir, name), old, new, fn); err != nil {
			return err
		}
	}
	return nil
}

func (e *Entry) nameOr(o *Entry) string {
	if e != nil {
		return e.Name
	}
	return o.Name
}

func diffEntries(ctx context.Context, g cas.Getter, p string, old, new *Entry, fn func(string, *Entry, *Entry) error) error {
	bothDirs := old != nil && new != nil && old.Kind == KindDir && new.Kind == KindDir
	var changed bool
	if bothDirs {
		o := *old
		o.Tree = new.Tree
		changed = !entriesEqual(&o, new)
	} else {
		changed = old == nil || new == nil || !entriesEqual(old, new)
	}
	if changed {
		if err := fn(p, old, new); errors.Is(err, SkipSubtree) {
			return nil
		} else if err != nil {
			return err
		}
	}
	var at, bt cas.Ref
	if old != nil && old.Kind == KindDir {
		at = old.Tree
	}
	if new != nil && new.Kind == KindDir {
		bt = new.Tree
	}
	return diffTrees(ctx, g, at, bt, p, fn)
}

// entriesEqual reports whether two entries are identical in every field.
func entriesEqual(a, b *Entry) bool {
	return a.Name == b.Name && a.Kind == b.Kind && a.Mode == b.Mode &&
		a.UID == b.UID && a.GID == b.GID && a.Size == b.Size &&
		a.MtimeNs == b.MtimeNs && a.CtimeNs == b.CtimeNs && a.AtimeNs == b.AtimeNs && a.BtimeNs == b.BtimeNs &&
		slices.Equal(a.Chunks, b.Chunks) && a.Index == b.Index && a.Depth == b.Depth &&
		a.Tree == b.Tree && a.Target == b.Target && a.Rdev == b.Rdev &&
		slices.EqualFunc(a.Xattrs, b.Xattrs, func(x, y Xattr) bool {
			return x.Name == y.Name && string(x.Value) == string(y.Value)
		}) &&
		a.LinkID == b.LinkID && a.Nlink == b.Nlink
}

// BuildTree stores the tree holding files, keyed by slash-separated path
// (see ValidatePath), and returns its root ref. Each entry's Name is set
// from its path. Directories in files keep their attributes (their Tree is
// computed); missing intermediate directories get DefaultDirMode and zero
// times. An entry at "" holds the root's own attributes (Tree.Self).
func BuildTree(ctx context.Context, p cas.Putter, files map[string]Entry) (cas.Ref, error) {
	type dirNode struct {
		entry    Entry
		children map[string]*dirNode
		isDir    bool
	}
	newDir := func(name string) *dirNode {
		return &dirNode{entry: Entry{Name: name, Kind: KindDir, Mode: DefaultDirMode}, children: map[string]*dirNode{}, isDir: true}
	}
	root := newDir("")
	var self *DirAttr
	for _, path := range slices.Sorted(maps.Keys(files)) {
		if path == "" {
			e := files[path]
			if e.Kind != KindDir {
				return cas.Ref{}, errf(ErrInvalidPath, "the root as a %v", e.Kind)
			}
			self = &DirAttr{Mode: e.Mode, UID: e.UID, GID: e.GID, MtimeNs: e.MtimeNs, CtimeNs: e.CtimeNs, AtimeNs: e.AtimeNs, BtimeNs: e.BtimeNs, Xattrs: e.Xattrs}
			continue
		}
		if err := ValidatePath(path); err != nil {
			return cas.Ref{}, err
		}
		e := files[path]
		segs := strings.Split(path, "/")
		d := root
		for i, seg := range segs[:len(segs)-1] {
			c := d.children[seg]
			if c == nil {
				c = newDir(seg)
				d.children[seg] = c
			} else if !c.isDir {
				return cas.Ref{}, errf(ErrInvalidPath, "%q: %q is a %v", path, strings.Join(segs[:i+1], "/"), c.entry.Kind)
			}
			d = c
		}
		name := segs[len(segs)-1]
		e.Name = name
		if d.children[name] != nil {
			// Sorted order puts "a" before "a/b", and map keys are unique.
			panic("manifest: BuildTree: path seen twice: " + path)
		}
		n := &dirNode{entry: e, isDir: e.Kind == KindDir}
		if n.isDir {
			n.children = map[string]*dirNode{}
		}
		d.children[name] = n
	}
	var put func(d *dirNode, path string) (cas.Ref, error)
	put = func(d *dirNode, path string) (cas.Ref, error) {
		t := &Tree{Entries: make([]Entry, 0, len(d.children))}
		if d == root {
			t.Self = self
		}
		for _, name := range slices.Sorted(maps.Keys(d.children)) {
			c := d.children[name]
			if c.isDir {
				ref, err := put(c, joinPath(path, name))
				if err != nil {
					return cas.Ref{}, err
				}
				c.entry.Tree = ref
			}
			t.Entries = append(t.Entries, c.entry)
		}
		ref, err := PutTree(ctx, p, t)
		return ref, wrapPath(err, path)
	}
	return put(root, "")
}
