package fsck

import (
	"context"
	"fmt"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// Problem is one damaged or missing object.
type Problem struct {
	Owner string  `json:"owner"` // "session NAME" or "snapshot ID (session NAME)"
	Path  string  `json:"path"`  // inside the owner's tree; "" for its root or record
	Kind  string  `json:"kind"`  // record, tree, index, chunk, head
	Ref   cas.Ref `json:"ref,omitzero"`
	Err   string  `json:"error"`
}

func (p Problem) String() string {
	where := p.Owner
	if p.Path != "" {
		where += ": " + p.Path
	}
	ref := ""
	if !p.Ref.IsZero() {
		ref = " " + p.Ref.Short()
	}
	return fmt.Sprintf("%s: %s%s: %s", where, p.Kind, ref, p.Err)
}

// Report is the outcome of a Check.
type Report struct {
	Sessions  int       `json:"sessions"`
	Snapshots int       `json:"snapshots"`
	Objects   int64     `json:"objects"` // distinct objects read
	Bytes     int64     `json:"bytes"`   // their plain bytes
	Problems  []Problem `json:"problems"`
}

// Progress is told how many objects and bytes were read so far.
type Progress func(objects, bytes int64)

// Store is what Check and Stats need.
type Store interface {
	cas.Getter
	cas.Enumerator
}

type checker struct {
	ctx      context.Context
	g        cas.Getter
	trees    map[cas.Ref]struct{} // tree nodes verified with everything below
	chunks   map[cas.Ref]int      // objects read and verified, with their plain length
	bad      map[cas.Ref]string   // objects that failed to load, with the error
	rep      *Report
	progress Progress
	owner    string
}

func newChecker(g cas.Getter, progress Progress) *checker {
	return &checker{g: g, trees: make(map[cas.Ref]struct{}), chunks: make(map[cas.Ref]int),
		bad: make(map[cas.Ref]string), rep: &Report{}, progress: progress}
}

// Check verifies every object reachable from cat. It returns an error only
// when it cannot run (the catalog cannot be listed, or ctx ends); damage
// is reported in Report.Problems.
func Check(ctx context.Context, g cas.Getter, cat *catalog.Catalog, progress Progress) (*Report, error) {
	c := newChecker(g, progress)
	c.ctx = ctx
	heads, err := cat.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	idx, err := cat.SnapshotIndex(ctx)
	if err != nil {
		return nil, err
	}
	c.rep.Sessions, c.rep.Snapshots = len(heads), len(idx)
	for _, h := range heads {
		c.owner = "session " + h.Session
		c.tree(h.Root, "")
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	for _, s := range idx {
		c.owner = fmt.Sprintf("snapshot %s (session %s)", s.ID[:12], s.Session)
		snap, _, err := cat.Snapshot(ctx, s.ID)
		if err != nil {
			c.problem("", "record", cas.Ref{}, err)
			continue
		}
		c.tree(snap.Root, "")
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return c.rep, nil
}

// Verifier checks trees one at a time, as Check does every tree of a
// catalog, remembering what it verified: checking a series of snapshots
// that share most of their objects costs what they do not share. It is
// not safe for concurrent use.
type Verifier struct{ c *checker }

// NewVerifier returns a Verifier reading through g.
func NewVerifier(g cas.Getter) *Verifier { return &Verifier{c: newChecker(g, nil)} }

// Tree checks the tree at root and everything below it, and returns the
// problems found, each with owner.
func (v *Verifier) Tree(ctx context.Context, owner string, root cas.Ref) ([]Problem, error) {
	c := v.c
	c.ctx, c.owner = ctx, owner
	from := len(c.rep.Problems)
	c.tree(root, "")
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.rep.Problems[from:len(c.rep.Problems):len(c.rep.Problems)], nil
}

func (c *checker) problem(path, kind string, ref cas.Ref, err error) {
	c.rep.Problems = append(c.rep.Problems, Problem{Owner: c.owner, Path: path, Kind: kind, Ref: ref, Err: err.Error()})
}

// get reads ref once and returns its plain length; later calls answer
// from what the first learned.
func (c *checker) get(ref cas.Ref) (int, error) {
	if n, ok := c.chunks[ref]; ok {
		return n, nil
	}
	if msg, ok := c.bad[ref]; ok {
		return 0, fmt.Errorf("%s", msg)
	}
	b, err := c.g.Get(c.ctx, ref)
	if err != nil {
		c.bad[ref] = err.Error()
		return 0, err
	}
	c.chunks[ref] = len(b)
	c.rep.Objects++
	c.rep.Bytes += int64(len(b))
	if c.progress != nil && c.rep.Objects%256 == 0 {
		c.progress(c.rep.Objects, c.rep.Bytes)
	}
	return len(b), nil
}

// tree checks the tree node ref at path and everything below it.
func (c *checker) tree(ref cas.Ref, path string) {
	if c.ctx.Err() != nil {
		return
	}
	if _, ok := c.trees[ref]; ok {
		return // a verified subtree: everything below was checked with it
	}
	t, err := manifest.GetTree(c.ctx, c.g, ref)
	if err != nil {
		c.bad[ref] = err.Error()
		c.problem(path, "tree", ref, err)
		return
	}
	problems := len(c.rep.Problems)
	for i := range t.Entries {
		e := &t.Entries[i]
		p := e.Name
		if path != "" {
			p = path + "/" + e.Name
		}
		switch e.Kind {
		case manifest.KindDir:
			c.tree(e.Tree, p)
		case manifest.KindFile:
			c.file(e, p)
		}
	}
	c.rep.Objects++
	if len(c.rep.Problems) == problems {
		c.trees[ref] = struct{}{}
	}
}

// file checks a file's index nodes and chunks. A chunk is read once, but
// its length is checked at every use: the chunk-length rule
// (manifest.CheckChunk) depends on the file's size and the chunk's place,
// so one chunk may be right in one file and wrong in another.
func (c *checker) file(e *manifest.Entry, path string) {
	if e.Depth > 0 {
		if msg, bad := c.bad[e.Index]; bad {
			c.problem(path, "index", e.Index, fmt.Errorf("%s", msg))
			return
		}
	}
	cl, err := manifest.LoadChunkList(c.ctx, c.g, e)
	if err != nil {
		if e.Depth > 0 {
			c.bad[e.Index] = err.Error()
		}
		c.problem(path, "index", e.Index, err)
		return
	}
	for i := 0; i < cl.Len(); i++ {
		ref := cl.At(i)
		if ref.IsZero() {
			continue
		}
		n, err := c.get(ref)
		if err != nil {
			c.problem(path, "chunk", ref, fmt.Errorf("chunk %d: %w", i, err))
			continue
		}
		if err := manifest.CheckChunk(e.Size, i, n); err != nil {
			c.problem(path, "chunk", ref, err)
		}
	}
}
