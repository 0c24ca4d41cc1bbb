package remote

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// FsckOptions tune a remote fsck.
type FsckOptions struct {
	// Session checks only that session's head and what it reaches; ""
	// checks every head.
	Session  string
	Progress func(Progress)
}

// Fsck reads back every object the remote's heads (or one session's head)
// reach, as gc counts them: each head, the records along its lineage as
// far as forget left them, and every node and chunk under their trees,
// each checked as a pull checks it (Remote.GetChunk, Remote.Snapshot). It
// goes on past a problem and reports every missing or damaged object with
// its key and what reaches it; PushOptions.Repair uploads them again. It
// holds a push lock, so that a remote gc deletes nothing it is about to
// read. It fails only when it cannot run: the remote does not answer, ctx
// ends, or opts.Session has no head (ErrNoSnapshot).
func Fsck(ctx context.Context, r *Remote, opts FsckOptions) (*FsckReport, error) {
	l, err := r.lockPush(ctx)
	if err != nil {
		return nil, fmt.Errorf("fsck %s: %w", r.cfg.Name, err)
	}
	defer l.release()
	f := &fscker{r: r, opts: opts, problems: make(map[string]*ObjectProblem),
		state: make(map[cas.Ref]error), clean: make(map[cas.Ref]struct{})}
	f.rep.Remote = r.cfg.Name
	if err := f.run(ctx); err != nil {
		return nil, fmt.Errorf("fsck %s: %w", r.cfg.Name, err)
	}
	// A lapsed lock let a gc in: what it deleted would show as missing.
	if err := l.check(); err != nil {
		return nil, fmt.Errorf("fsck %s: %w", r.cfg.Name, err)
	}
	f.rep.Problems = make([]ObjectProblem, 0, len(f.problems))
	for _, p := range f.problems {
		f.rep.Problems = append(f.rep.Problems, *p)
	}
	slices.SortFunc(f.rep.Problems, func(a, b ObjectProblem) int { return strings.Compare(a.Key, b.Key) })
	return &f.rep, nil
}

type fscker struct {
	r        *Remote
	opts     FsckOptions
	rep      FsckReport
	problems map[string]*ObjectProblem // by key
	// state holds every node and chunk read: nil if intact, else the
	// damage found.
	state map[cas.Ref]error
	// clean holds nodes verified with everything below them: a later tree
	// that shares one does not descend it again.
	clean map[cas.Ref]struct{}
}

type reachedSnapshot struct {
	id   string
	snap *manifest.Snapshot
}

// run reads the heads and their lineage, then checks every tree.
func (f *fscker) run(ctx context.Context) error {
	sessions := []string{f.opts.Session}
	if f.opts.Session == "" {
		var err error
		if sessions, err = f.r.Heads(ctx); err != nil {
			return err
		}
	}
	seen := make(map[string]bool)
	var snaps []reachedSnapshot
	for _, s := range sessions {
		got, err := f.head(ctx, s, seen)
		if err != nil {
			return err
		}
		snaps = append(snaps, got...)
	}
	f.rep.Snapshots = len(snaps)
	for _, rs := range snaps {
		if err := f.tree(ctx, Reach{Snapshot: rs.id, Session: rs.snap.Session}, rs.snap.Root); err != nil {
			return fmt.Errorf("snapshot %s: %w", rs.id[:12], err)
		}
	}
	return nil
}

// head reads session's head and the records it reaches that seen does
// not hold yet.
func (f *fscker) head(ctx context.Context, session string, seen map[string]bool) ([]reachedSnapshot, error) {
	h, err := f.r.Head(ctx, session)
	switch {
	case errors.Is(err, ErrNoSnapshot) && f.opts.Session == "":
		return nil, nil // removed since the listing
	case errors.Is(err, cas.ErrCorrupt):
		f.damage(f.r.headKey(session), "head", cas.Ref{}, err, Reach{Session: session})
		return nil, nil
	case err != nil:
		return nil, err
	}
	f.rep.Heads++
	var snaps []reachedSnapshot
	err = f.r.walkLineage(ctx, h.Snapshot, seen, func(id string, snap *manifest.Snapshot, err error) error {
		if isDamage(err) {
			f.damage(f.r.recordKey(id), "record", cas.Ref{}, err, Reach{Snapshot: id, Session: session})
			return nil
		}
		if err == nil {
			snaps = append(snaps, reachedSnapshot{id, snap})
		}
		return err
	})
	return snaps, err
}

// damage records a problem with the object at key, reached by by.
func (f *fscker) damage(key, kind string, ref cas.Ref, err error, by Reach) {
	p, ok := f.problems[key]
	if !ok {
		p = &ObjectProblem{Key: key, Kind: kind, Ref: ref, State: damageState(err), Err: err.Error()}
		f.problems[key] = p
	}
	if !slices.Contains(p.Reached, by) {
		p.Reached = append(p.Reached, by)
	}
}

// treeCheck is the walk of one tree.
type treeCheck struct {
	owner Reach
	kinds map[cas.Ref]manifest.RefKind // nodes met, by kind
	seen  map[cas.Ref]struct{}         // chunks met
	// visited holds the nodes read intact; damaged says whether anything
	// below the root is not.
	visited []cas.Ref
	damaged bool
}

// tree checks the tree under root for owner, level by level: a level's
// nodes are read back Parallel at a time (again when an earlier tree read
// them, as their bytes are not kept), then the chunks they name that no
// earlier tree read. A tree found whole marks its nodes clean, and later
// trees do not descend them.
func (f *fscker) tree(ctx context.Context, owner Reach, root cas.Ref) error {
	if _, ok := f.clean[root]; ok {
		return nil
	}
	w := &treeCheck{owner: owner, kinds: map[cas.Ref]manifest.RefKind{root: manifest.TreeNode}, seen: make(map[cas.Ref]struct{})}
	frontier := []cas.Ref{root}
	for len(frontier) > 0 {
		f.report(owner)
		next, chunks, err := f.nodes(ctx, w, frontier)
		if err != nil {
			return err
		}
		if err := f.chunks(ctx, w, chunks); err != nil {
			return err
		}
		frontier = next
	}
	if !w.damaged {
		for _, ref := range w.visited {
			f.clean[ref] = struct{}{}
		}
	}
	return nil
}

func (f *fscker) report(owner Reach) {
	if f.opts.Progress != nil {
		f.opts.Progress(Progress{Phase: PhaseVerify, Snapshot: owner.Snapshot, ObjectsDone: f.rep.Objects, BytesDone: f.rep.Bytes})
	}
}

// read notes what reading ref back found, and reports a damage.
func (f *fscker) read(w *treeCheck, ref cas.Ref, kind manifest.RefKind, got readBack) {
	if _, ok := f.state[ref]; !ok {
		f.state[ref] = got.bad
		f.rep.Objects++
		f.rep.Bytes += int64(got.size)
	}
	if got.bad != nil {
		f.damage(f.r.chunkKey(ref), kind.String(), ref, got.bad, w.owner)
		w.damaged = true
	}
}

// nodes reads a level's nodes back and returns the next level (nodes not
// met before in this tree nor clean) and the chunks they name that were
// never read; chunks read before that were damaged are reported for this
// tree too.
func (f *fscker) nodes(ctx context.Context, w *treeCheck, level []cas.Ref) ([]cas.Ref, []cas.Ref, error) {
	got, err := f.r.readBackAll(ctx, level, func(int) bool { return true })
	if err != nil {
		return nil, nil, err
	}
	var next, chunks []cas.Ref
	for i, ref := range level {
		kind := w.kinds[ref]
		f.read(w, ref, kind, got[i])
		if got[i].bad != nil {
			continue
		}
		err := nodeRefs(kind, got[i].data, func(c cas.Ref, k manifest.RefKind) {
			if k != manifest.Chunk {
				if _, ok := w.kinds[c]; !ok && !f.isClean(c) {
					w.kinds[c] = k
					next = append(next, c)
				}
				return
			}
			if _, ok := w.seen[c]; ok {
				return
			}
			w.seen[c] = struct{}{}
			if bad, ok := f.state[c]; !ok {
				chunks = append(chunks, c)
			} else if bad != nil {
				f.read(w, c, k, readBack{bad: bad})
			}
		})
		if err != nil {
			f.damage(f.r.chunkKey(ref), kind.String(), ref, fmt.Errorf("%s node %s: %w: %w", kind, ref.Short(), cas.ErrCorrupt, err), w.owner)
			w.damaged = true
			continue
		}
		w.visited = append(w.visited, ref)
	}
	return next, chunks, nil
}

func (f *fscker) isClean(ref cas.Ref) bool {
	_, ok := f.clean[ref]
	return ok
}

// chunks reads chunks back, keeping none of their bytes.
func (f *fscker) chunks(ctx context.Context, w *treeCheck, refs []cas.Ref) error {
	got, err := f.r.readBackAll(ctx, refs, nil)
	if err != nil {
		return err
	}
	for i, ref := range refs {
		f.read(w, ref, manifest.Chunk, got[i])
	}
	return nil
}
