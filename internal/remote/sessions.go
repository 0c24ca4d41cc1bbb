package remote

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// Sessions lists the remote's sessions, by name: every session with a
// head or a record. It reads every head and record and every tree node
// they reach (the listing of chunks gives their sizes).
func (r *Remote) Sessions(ctx context.Context) ([]SessionInfo, error) {
	heads, err := r.readHeads(ctx)
	if err != nil {
		return nil, err
	}
	recs, err := r.records(ctx)
	if err != nil {
		return nil, err
	}
	sizes, err := r.chunkSizes(ctx)
	if err != nil {
		return nil, err
	}
	by := make(map[string]*SessionInfo)
	info := func(s string) *SessionInfo {
		if by[s] == nil {
			by[s] = &SessionInfo{Session: s}
		}
		return by[s]
	}
	for _, h := range heads {
		in := info(h.Session)
		in.Head, in.HeadUpdated = h.Snapshot, time.Unix(0, h.UpdatedNs).UTC()
	}
	roots := make(map[string][]cas.Ref)
	for _, snap := range recs {
		info(snap.Session).Snapshots++
		roots[snap.Session] = append(roots[snap.Session], snap.Root)
	}
	sum := func(seen map[cas.Ref]struct{}) int64 {
		var n int64
		for ref := range seen {
			n += sizes[r.chunkName(ref)]
		}
		return n
	}
	out := make([]SessionInfo, 0, len(by))
	for _, in := range by {
		seen := make(map[cas.Ref]struct{})
		if err := r.reach(ctx, roots[in.Session], seen); err != nil {
			return nil, fmt.Errorf("remote %s: session %s: %w", r.cfg.Name, in.Session, err)
		}
		in.Objects, in.Bytes = len(seen), sum(seen)
		if snap, ok := recs[in.Head]; ok {
			head := make(map[cas.Ref]struct{})
			if err := r.reach(ctx, []cas.Ref{snap.Root}, head); err != nil {
				return nil, fmt.Errorf("remote %s: session %s: %w", r.cfg.Name, in.Session, err)
			}
			in.HeadBytes = sum(head)
		}
		out = append(out, *in)
	}
	slices.SortFunc(out, func(a, b SessionInfo) int { return strings.Compare(a.Session, b.Session) })
	return out, nil
}

// ErrHeadSnapshot is the error of a forget that named a snapshot a
// session's remote head holds. It wraps cas.ErrConflict.
var ErrHeadSnapshot = fmt.Errorf("remote: snapshot is a session's head: %w", cas.ErrConflict)

// Forget deletes the records of the snapshots named by specs (full ids
// or unique id prefixes) from the remote; gc then deletes what only they
// reached. A snapshot a head holds is refused, and nothing is deleted. It
// returns the ids forgotten (with dryRun: that would be).
func (r *Remote) Forget(ctx context.Context, specs []string, dryRun bool) ([]string, error) {
	heads, err := r.headSnapshots(ctx)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, spec := range specs {
		id, err := resolveRemote(ctx, r, spec)
		if err != nil {
			return nil, fmt.Errorf("forget %s: %w", spec, err)
		}
		if has, err := r.HasSnapshot(ctx, id); err != nil {
			return nil, err
		} else if !has {
			return nil, fmt.Errorf("forget %s on %s: %w", id[:12], r.cfg.Name, ErrNoSnapshot)
		}
		if s, ok := heads[id]; ok {
			return nil, fmt.Errorf("forget %s on %s: %w of %s (push a later snapshot, or session rm --purge --remote)", id[:12], r.cfg.Name, ErrHeadSnapshot, s)
		}
		ids = append(ids, id)
	}
	if dryRun {
		return ids, nil
	}
	return ids, r.deleteRecords(ctx, ids)
}

// ForgetPolicy applies policy (catalog.Policy, the rules of local forget)
// to session's records on the remote and deletes those it does not keep.
// The session's head snapshot is always kept. It returns the decisions,
// newest first.
func (r *Remote) ForgetPolicy(ctx context.Context, session string, policy catalog.Policy, loc *time.Location, dryRun bool) ([]catalog.Decision, error) {
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if policy.Empty() {
		return nil, fmt.Errorf("%w: it would forget every snapshot of %s on %s", catalog.ErrNoPolicy, session, r.cfg.Name)
	}
	recs, err := r.records(ctx)
	if err != nil {
		return nil, err
	}
	head := ""
	if h, err := r.Head(ctx, session); err == nil {
		head = h.Snapshot
	} else if !errors.Is(err, ErrNoSnapshot) {
		return nil, err
	}
	var cands []catalog.Candidate
	for id, snap := range recs {
		if snap.Session == session {
			cands = append(cands, catalog.Candidate{ID: id, Time: time.Unix(0, snap.CreatedNs)})
		}
	}
	if len(cands) == 0 && head == "" {
		return nil, fmt.Errorf("remote %s: session %s: %w", r.cfg.Name, session, ErrNoSnapshot)
	}
	ds := policy.Apply(cands, loc)
	var drop []string
	for i := range ds {
		d := &ds[i]
		if d.ID == head {
			d.Reasons = append(d.Reasons, "head of session "+session)
		}
		d.Keep = len(d.Reasons) > 0
		if !d.Keep {
			drop = append(drop, d.ID)
		}
	}
	if dryRun {
		return ds, nil
	}
	return ds, r.deleteRecords(ctx, drop)
}

// Purge deletes session's head on the remote, then every record that
// names the session; gc then deletes what only they reached. Records of
// other sessions are untouched, also those forked from this one (their
// logs show the origin as forgotten). It returns the ids deleted.
func (r *Remote) Purge(ctx context.Context, session string) ([]string, error) {
	if err := manifest.ValidateSessionName(session); err != nil {
		return nil, err
	}
	recs, err := r.records(ctx)
	if err != nil {
		return nil, err
	}
	_, herr := r.Head(ctx, session)
	if herr != nil && !errors.Is(herr, ErrNoSnapshot) {
		return nil, herr
	}
	var ids []string
	for id, snap := range recs {
		if snap.Session == session {
			ids = append(ids, id)
		}
	}
	if herr != nil && len(ids) == 0 {
		return nil, fmt.Errorf("remote %s: session %s: %w", r.cfg.Name, session, ErrNoSnapshot)
	}
	slices.Sort(ids)
	// The head first: a purge cut short leaves records no head reaches,
	// which gc deletes, never a head naming a deleted record.
	if err := r.deleteObject(ctx, r.headKey(session)); err != nil {
		return nil, err
	}
	return ids, r.deleteRecords(ctx, ids)
}

// headSnapshots maps each head's snapshot to its session.
func (r *Remote) headSnapshots(ctx context.Context) (map[string]string, error) {
	heads, err := r.readHeads(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(heads))
	for _, h := range heads {
		out[h.Snapshot] = h.Session
	}
	return out, nil
}

// readHeads reads every session's head; one removed since the listing is
// left out.
func (r *Remote) readHeads(ctx context.Context) ([]*Head, error) {
	if r.crypt != nil {
		return r.sealedHeads(ctx)
	}
	names, err := r.Heads(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*Head, 0, len(names))
	for _, s := range names {
		h, err := r.Head(ctx, s)
		if errors.Is(err, ErrNoSnapshot) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

func (r *Remote) deleteRecords(ctx context.Context, ids []string) error {
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = r.objectName(snapshotsDir, id)
	}
	return r.deleteNames(ctx, snapshotsDir, names)
}
