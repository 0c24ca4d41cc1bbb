package remote

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// GC deletes every record and chunk that no head on the remote reaches:
// a head reaches its snapshot, that record's Parent and Origin records
// (as far as they are on the remote: forget cuts lineage), and every node
// and chunk under their trees. It is safe while other hosts push: it
// takes a gc lock and waits for pushes in progress to finish, and pushes
// starting later wait for it (lock.go; the argument is in
// docs/ARCHITECTURE-remote.md). A record pushed without moving a head
// (PushOptions.NoHead) is not reached and is deleted.
func GC(ctx context.Context, r *Remote) (*GCResult, error) {
	start := time.Now()
	if err := r.refuseEncrypted(ctx); err != nil {
		return nil, fmt.Errorf("gc %s: %w", r.cfg.Name, err)
	}
	l, waited, err := r.lockGCFor(ctx)
	if err != nil {
		return nil, fmt.Errorf("gc %s: %w", r.cfg.Name, err)
	}
	defer l.release()
	res := &GCResult{Remote: r.cfg.Name, WaitedPushes: waited}
	if err := r.gc(ctx, l, res); err != nil {
		return res, fmt.Errorf("gc %s: %w", r.cfg.Name, err)
	}
	res.Duration = time.Since(start)
	return res, nil
}

func (r *Remote) gc(ctx context.Context, l *lock, res *GCResult) error {
	// Mark. Under the lock no push runs, so heads, records and chunks
	// hold still but for forgets and purges, which only delete.
	keep, reached, err := r.mark(ctx, res)
	if err != nil {
		return err
	}
	// Sweep records first: a record left while its tree goes would break
	// "a record implies its tree".
	if err := r.sweepRecords(ctx, l, keep, res); err != nil {
		return err
	}
	return r.sweepChunks(ctx, l, reached, res)
}

// mark returns the records every head reaches and the nodes and chunks
// under their trees.
func (r *Remote) mark(ctx context.Context, res *GCResult) (map[string]bool, map[cas.Ref]struct{}, error) {
	heads, err := r.headSnapshots(ctx)
	if err != nil {
		return nil, nil, err
	}
	res.Heads = len(heads)
	keep := make(map[string]bool)
	var roots []cas.Ref
	for id, session := range heads {
		err := r.walkLineage(ctx, id, keep, func(_ string, snap *manifest.Snapshot, err error) error {
			if err == nil {
				roots = append(roots, snap.Root)
			}
			return err
		})
		if err != nil {
			return nil, nil, fmt.Errorf("head of %s: %w", session, err)
		}
	}
	reached := make(map[cas.Ref]struct{})
	if err := r.reach(ctx, roots, reached); err != nil {
		return nil, nil, err
	}
	return keep, reached, nil
}

// walkLineage reads the record id and, depth first, its Parent and Origin
// records, each at most once (seen), and calls fn with each record read,
// or with the error of one that could not be; fn's error ends the walk.
// An ancestor that is not on the remote ends its line unreported (a forget
// deleted it); id itself missing is reported (ErrNoSnapshot).
func (r *Remote) walkLineage(ctx context.Context, id string, seen map[string]bool, fn func(id string, snap *manifest.Snapshot, err error) error) error {
	var visit func(id string, head bool) error
	visit = func(id string, head bool) error {
		if id == "" || seen[id] {
			return nil
		}
		_, snap, err := r.Snapshot(ctx, id)
		if errors.Is(err, ErrNoSnapshot) && !head {
			return nil
		}
		seen[id] = true
		if err := fn(id, snap, err); err != nil || snap == nil {
			return err
		}
		if err := visit(snap.Parent, false); err != nil {
			return err
		}
		if snap.Origin != nil {
			return visit(snap.Origin.Snapshot, false)
		}
		return nil
	}
	return visit(id, true)
}

// sweepRecords deletes every record that keep leaves out. It goes by
// object name, so it reads nothing more on an encrypted remote.
func (r *Remote) sweepRecords(ctx context.Context, l *lock, keep map[string]bool, res *GCResult) error {
	names, err := r.recordNames(ctx)
	if err != nil {
		return err
	}
	kept := make(map[string]bool, len(keep))
	for id := range keep {
		kept[r.objectName(snapshotsDir, id)] = true
	}
	var drop []string
	for _, name := range names {
		if kept[name] {
			res.Records++
		} else {
			drop = append(drop, name)
		}
	}
	if err := l.check(); err != nil {
		return err
	}
	if err := r.deleteNames(ctx, snapshotsDir, drop); err != nil {
		return err
	}
	res.DeletedRecords = len(drop)
	return nil
}

// sweepChunks deletes every chunk and node that is not reached, by object
// name, in batches, re-checking the lock between them.
func (r *Remote) sweepChunks(ctx context.Context, l *lock, reached map[cas.Ref]struct{}, res *GCResult) error {
	sizes, err := r.chunkSizes(ctx)
	if err != nil {
		return err
	}
	names := make(map[string]struct{}, len(reached))
	for ref := range reached {
		names[r.chunkName(ref)] = struct{}{}
	}
	var drop []string
	for name, n := range sizes {
		if _, ok := names[name]; ok {
			res.Chunks++
			res.Kept += n
		} else {
			drop = append(drop, name)
			res.DeletedBytes += n
		}
	}
	const batch = 1000
	for len(drop) > 0 {
		if err := l.check(); err != nil {
			return err
		}
		n := min(batch, len(drop))
		if err := r.deleteNames(ctx, chunksDir, drop[:n]); err != nil {
			return err
		}
		res.DeletedChunks += n
		drop = drop[n:]
	}
	return nil
}
