package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// PullOptions tune a pull.
type PullOptions struct {
	// All fetches every file chunk of the snapshot too, so that it reads
	// without the remote. Without it chunks come on first read, through
	// ReadThrough.
	All      bool
	Progress func(Progress)

	// local answers which chunks pullChunks needs not fetch, when the
	// target's own HasMany counts chunks that are only on a remote (a
	// ReadThrough's hinted chunks); nil means the target.
	local cas.HasManyer
}

// PullResult says what a pull did.
type PullResult struct {
	ID       string
	Snapshot *manifest.Snapshot
	// Records counts the snapshots registered (the snapshot and the part
	// of its lineage that was not local).
	Records int
	// Fetched and FetchedBytes (plain) count objects brought from the
	// remote; Nodes counts the tree and index nodes of the snapshot.
	Fetched      int
	FetchedBytes int64
	Nodes        int
}

// PullTarget is the local store a pull writes into.
type PullTarget interface {
	cas.Getter
	cas.Putter
	cas.HasManyer
}

// Pull brings the snapshot named by spec from the remote: its record and
// every tree and index node, and those of its lineage (Parent and Origin,
// transitively) that the local catalog lacks; with opts.All also the
// snapshot's file chunks. Every object is checked against its ref before it
// is stored. Snapshots are registered in cat ancestors first, each only
// once its nodes are durable, so an interrupted pull leaves a consistent
// catalog and a rerun completes it. spec is a full snapshot id, a unique
// prefix of at least catalog.MinPrefixLen hex digits, or a session name
// (its remote head).
func Pull(ctx context.Context, local PullTarget, cat *catalog.Catalog, r *Remote, spec string, opts PullOptions) (*PullResult, error) {
	id, err := resolveRemote(ctx, r, spec)
	if err != nil {
		return nil, fmt.Errorf("pull %s from %s: %w", spec, r.Name(), err)
	}
	p := &puller{local: local, cat: cat, r: r, opts: opts}
	p.res.ID = id
	if err := p.pull(ctx, id); err != nil {
		return &p.res, fmt.Errorf("pull %s from %s: %w", spec, r.Name(), err)
	}
	if opts.All {
		if err := p.pullChunks(ctx, p.res.Snapshot.Root); err != nil {
			return &p.res, fmt.Errorf("pull %s from %s: chunks: %w", spec, r.Name(), err)
		}
		if s, ok := local.(cas.Syncer); ok {
			if err := s.Sync(ctx); err != nil {
				return &p.res, fmt.Errorf("pull %s from %s: %w", spec, r.Name(), err)
			}
		}
	}
	return &p.res, nil
}

// resolveRemote turns a pull spec into a full snapshot id.
func resolveRemote(ctx context.Context, r *Remote, spec string) (string, error) {
	spec = strings.TrimPrefix(spec, "@")
	if manifest.ValidateSessionName(spec) == nil && !isHexPrefix(spec) {
		h, err := r.Head(ctx, spec)
		if err != nil {
			return "", err
		}
		return h.Snapshot, nil
	}
	if isFullID(spec) {
		return spec, nil
	}
	if len(spec) < catalog.MinPrefixLen || !isHexPrefix(spec) {
		if h, err := r.Head(ctx, spec); err == nil {
			return h.Snapshot, nil
		}
		return "", fmt.Errorf("snapshot %q: want a session, an id or at least %d hex digits: %w", spec, catalog.MinPrefixLen, ErrNoSnapshot)
	}
	ids, err := r.Snapshots(ctx, spec)
	if err != nil {
		return "", err
	}
	switch len(ids) {
	case 0:
		if h, err := r.Head(ctx, spec); err == nil {
			return h.Snapshot, nil // a session whose name looks like hex
		}
		return "", fmt.Errorf("snapshot %s: %w", spec, ErrNoSnapshot)
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("snapshot %s: %s, %s, …: %w", spec, ids[0][:12], ids[1][:12], catalog.ErrAmbiguous)
}

func isHexPrefix(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return s != ""
}

type puller struct {
	local PullTarget
	cat   *catalog.Catalog
	r     *Remote
	opts  PullOptions
	res   PullResult
	// done holds nodes known to be local with everything below them
	// (nodes of this pull's trees).
	done map[cas.Ref]struct{}
}

func (p *puller) report(pr Progress) {
	if p.opts.Progress != nil {
		p.opts.Progress(pr)
	}
}

// pull registers id after its lineage and its tree.
func (p *puller) pull(ctx context.Context, id string) error {
	p.done = make(map[cas.Ref]struct{})
	visited := make(map[string]bool)
	var visit func(id string, target bool) error
	visit = func(id string, target bool) error {
		if id == "" || visited[id] {
			return nil
		}
		visited[id] = true
		local, err := p.cat.HasSnapshot(ctx, id)
		if err != nil {
			return err
		}
		if local && !target {
			return nil // registered: its lineage and tree are local
		}
		p.report(Progress{Phase: PhaseLineage, Snapshot: id})
		raw, snap, err := p.r.Snapshot(ctx, id)
		if err != nil {
			return err
		}
		if target {
			p.res.Snapshot = snap
		}
		if local {
			return nil
		}
		if err := visit(snap.Parent, false); err != nil {
			return err
		}
		if snap.Origin != nil {
			if err := visit(snap.Origin.Snapshot, false); err != nil {
				return err
			}
		}
		if err := p.pullNodes(ctx, id, snap.Root); err != nil {
			return fmt.Errorf("snapshot %s: %w", id, err)
		}
		if _, _, err := p.cat.AddSnapshot(ctx, raw); err != nil {
			return err
		}
		p.res.Records++
		return nil
	}
	return visit(id, true)
}

// pullNodes makes every tree and index node under root local, level by
// level: a level's nodes are looked up locally in one batch and the
// missing ones fetched Parallel at a time. Nodes found locally are still
// read and descended (a node alone says nothing about its subtree locally:
// a pull that was interrupted may have stored a parent before its
// children).
func (p *puller) pullNodes(ctx context.Context, sid string, root cas.Ref) error {
	frontier := []cas.Ref{root}
	kinds := map[cas.Ref]manifest.RefKind{root: manifest.TreeNode}
	for len(frontier) > 0 {
		p.report(Progress{Phase: PhaseNodes, Snapshot: sid, Objects: int64(p.res.Nodes)})
		data, err := p.fetchAll(ctx, frontier)
		if err != nil {
			return err
		}
		var next []cas.Ref
		add := func(ref cas.Ref, kind manifest.RefKind) {
			if _, ok := p.done[ref]; ok {
				return
			}
			if _, ok := kinds[ref]; ok {
				return
			}
			kinds[ref] = kind
			next = append(next, ref)
		}
		for i, ref := range frontier {
			p.res.Nodes++
			p.done[ref] = struct{}{}
			kind := kinds[ref]
			err := nodeRefs(kind, data[i], func(c cas.Ref, k manifest.RefKind) {
				if k != manifest.Chunk {
					add(c, k)
				}
			})
			if err != nil {
				return fmt.Errorf("%s node %s: %w: %w", kind, ref.Short(), cas.ErrCorrupt, err)
			}
		}
		frontier = next
	}
	return nil
}

// fetchAll returns the plain bytes of refs, from the local store where
// present, else from the remote (then stored locally).
func (p *puller) fetchAll(ctx context.Context, refs []cas.Ref) ([][]byte, error) {
	has, err := p.local.HasMany(ctx, refs)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(refs))
	var fetched, bytes atomic.Int64
	err = parallel(ctx, p.r.parallel, len(refs), func(ctx context.Context, i int) error {
		if has[i] {
			data, err := p.local.Get(ctx, refs[i])
			if err == nil {
				out[i] = data
				return nil
			}
			if !errors.Is(err, cas.ErrCorrupt) && !errors.Is(err, cas.ErrNotFound) {
				return err
			}
			// A damaged local copy: replace it from the remote.
		}
		data, err := p.r.GetChunk(ctx, refs[i])
		if err != nil {
			return err
		}
		if _, err := p.local.Put(ctx, data); err != nil {
			return err
		}
		out[i] = data
		fetched.Add(1)
		bytes.Add(int64(len(data)))
		return nil
	})
	p.res.Fetched += int(fetched.Load())
	p.res.FetchedBytes += bytes.Load()
	return out, err
}

// pullChunks fetches every chunk under root that the local store lacks.
func (p *puller) pullChunks(ctx context.Context, root cas.Ref) error {
	set := make(map[cas.Ref]struct{})
	err := manifest.WalkRefs(ctx, p.local, root, func(ref cas.Ref, kind manifest.RefKind, _ string) error {
		if _, ok := set[ref]; ok && kind != manifest.Chunk {
			return manifest.SkipSubtree
		}
		set[ref] = struct{}{}
		return nil
	})
	if err != nil {
		return err
	}
	refs := sortedRefs(set)
	var local cas.HasManyer = p.local
	if p.opts.local != nil {
		local = p.opts.local
	}
	has, err := local.HasMany(ctx, refs)
	if err != nil {
		return err
	}
	var missing []cas.Ref
	for i, ok := range has {
		if !ok {
			missing = append(missing, refs[i])
		}
	}
	var done, bytes atomic.Int64
	progress := make(chan struct{}, 1)
	err = parallel(ctx, p.r.parallel, len(missing), func(ctx context.Context, i int) error {
		data, err := p.r.GetChunk(ctx, missing[i])
		if err != nil {
			return err
		}
		if _, err := p.local.Put(ctx, data); err != nil {
			return err
		}
		done.Add(1)
		bytes.Add(int64(len(data)))
		select {
		case progress <- struct{}{}:
			p.report(Progress{Phase: PhaseChunks, Snapshot: p.res.ID, Objects: int64(len(missing)), ObjectsDone: done.Load(), BytesDone: bytes.Load()})
			<-progress
		default:
		}
		return nil
	})
	p.res.Fetched += int(done.Load())
	p.res.FetchedBytes += bytes.Load()
	return err
}
