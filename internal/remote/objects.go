package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// object is one listed object: its name under its dir, stored size and
// the server's last-modified time.
type object struct {
	name     string
	size     int64
	modified time.Time
}

// listObjects calls fn, in key order, with every object under dir.
func (r *Remote) listObjects(ctx context.Context, dir string, fn func(object) error) error {
	if err := r.keyReady(ctx); err != nil {
		return err
	}
	p := r.prefix + dir
	token := ""
	for {
		objs, next, err := r.objects.List(ctx, p, token, 0)
		if err != nil {
			return err
		}
		for _, o := range objs {
			if err := fn(object{name: strings.TrimPrefix(o.Key, p), size: o.Size, modified: o.Modified}); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		token = next
	}
}

// deleteObject removes key; a missing key is success.
func (r *Remote) deleteObject(ctx context.Context, key string) error {
	if err := r.keyReady(ctx); err != nil {
		return err
	}
	return r.objects.Delete(ctx, key)
}

// chunkSizes lists the chunks directory: every chunk's stored size, by
// object name (chunkName of its ref).
func (r *Remote) chunkSizes(ctx context.Context) (map[string]int64, error) {
	sizes := make(map[string]int64)
	err := r.listObjects(ctx, chunksDir, func(o object) error {
		if isFullID(o.name) {
			sizes[o.name] = o.size
		}
		return nil
	})
	return sizes, err
}

// recordNames lists the names of the records (their ids on a plain
// remote).
func (r *Remote) recordNames(ctx context.Context) ([]string, error) {
	var names []string
	_, err := r.list(ctx, snapshotsDir, "", 0, func(name string) error {
		if isFullID(name) {
			names = append(names, name)
		}
		return nil
	})
	return names, err
}

// deleteNames deletes the objects names under dir, Parallel at a time.
func (r *Remote) deleteNames(ctx context.Context, dir string, names []string) error {
	return parallel(ctx, r.parallel, len(names), func(ctx context.Context, i int) error {
		return r.deleteObject(ctx, r.prefix+dir+names[i])
	})
}

// records reads every snapshot record on the remote, by id. A record that
// vanishes between the listing and its read (a forget on another host) is
// left out.
func (r *Remote) records(ctx context.Context) (map[string]*manifest.Snapshot, error) {
	if r.crypt != nil {
		return r.sealedRecords(ctx)
	}
	ids, err := r.Snapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	snaps := make([]*manifest.Snapshot, len(ids))
	err = parallel(ctx, r.parallel, len(ids), func(ctx context.Context, i int) error {
		_, s, err := r.Snapshot(ctx, ids[i])
		if err == nil || errors.Is(err, ErrNoSnapshot) {
			snaps[i] = s
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*manifest.Snapshot, len(ids))
	for i, s := range snaps {
		if s != nil {
			out[ids[i]] = s
		}
	}
	return out, nil
}

// reach adds to seen every node and chunk the trees under roots reach,
// reading the nodes from the remote (each verified by hash), level by
// level, Parallel at a time. A node it cannot read fails the walk: a
// caller deciding what to delete must not decide on a partial answer.
func (r *Remote) reach(ctx context.Context, roots []cas.Ref, seen map[cas.Ref]struct{}) error {
	kinds := make(map[cas.Ref]manifest.RefKind)
	var frontier []cas.Ref
	for _, root := range roots {
		if _, ok := seen[root]; !ok {
			seen[root] = struct{}{}
			kinds[root] = manifest.TreeNode
			frontier = append(frontier, root)
		}
	}
	for len(frontier) > 0 {
		next, err := r.reachLevel(ctx, frontier, kinds, seen)
		if err != nil {
			return err
		}
		frontier = next
	}
	return nil
}

// reachLevel reads one level of reach's walk and returns the next: the
// nodes below it not seen before.
func (r *Remote) reachLevel(ctx context.Context, level []cas.Ref, kinds map[cas.Ref]manifest.RefKind, seen map[cas.Ref]struct{}) ([]cas.Ref, error) {
	var (
		mu   sync.Mutex
		next []cas.Ref
	)
	add := func(ref cas.Ref, kind manifest.RefKind) {
		if ref.IsZero() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[ref]; ok {
			return
		}
		seen[ref] = struct{}{}
		if kind != manifest.Chunk {
			kinds[ref] = kind
			next = append(next, ref)
		}
	}
	err := parallel(ctx, r.parallel, len(level), func(ctx context.Context, i int) error {
		ref := level[i]
		mu.Lock()
		kind := kinds[ref]
		mu.Unlock()
		data, err := r.GetChunk(ctx, ref)
		if err != nil {
			return fmt.Errorf("%s node %s: %w", kind, ref.Short(), err)
		}
		if err := nodeRefs(kind, data, add); err != nil {
			return fmt.Errorf("%s node %s: %w: %w", kind, ref.Short(), cas.ErrCorrupt, err)
		}
		return nil
	})
	return next, err
}
