package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/homefs/homefs/cas"
)

var (
	// ErrProtected: a snapshot that may not be forgotten: a session's
	// head, or one a mount shows.
	ErrProtected = errors.New("catalog: snapshot may not be forgotten")
	// ErrNoPolicy: a policy forget without a single keep rule, which
	// would forget every snapshot.
	ErrNoPolicy = errors.New("catalog: no keep rule given")
)

// Protect names snapshots that must not be forgotten besides the heads'
// (which the catalog finds itself), by full id, with the reason ("mounted
// at /mnt/a").
type Protect map[string]string

// forgetBatch bounds the index entries one commit removes, so that a
// commit stays far below Badger's transaction limit.
const forgetBatch = 512

// maxForgetTries bounds the retries of one batch that lost a race with a
// change to one of the heads it checks.
const maxForgetTries = 16

// Forget removes snapshots from the index: ids are full ids. It refuses,
// with ErrProtected and forgetting none, when one is a session's head
// snapshot or in protect. The removal is atomic per batch of forgetBatch
// ids: one commit deletes their index entries, expecting each still
// indexed for its session, and expects the head of each session owning one
// of them as read (only the owner's head can name a snapshot: a restore
// to it, racing the forget, makes the commit conflict and be retried, so a
// head never names a forgotten snapshot). A snapshot already forgotten is
// skipped. Records and trees stay in the store until gc finds them
// unreached; a record whose Parent or Origin was forgotten stays valid
// (the link dangles: Log shows a gap).
func (c *Catalog) Forget(ctx context.Context, ids []string, protect Protect) error {
	for _, id := range ids {
		if !isFullID(id) {
			return fmt.Errorf("catalog: forget %q: not a full snapshot id: %w", id, ErrNoSnapshot)
		}
		if why, ok := protect[id]; ok {
			return fmt.Errorf("catalog: forget %s: %s: %w", id[:12], why, ErrProtected)
		}
	}
	for batch := range slices.Chunk(ids, forgetBatch) {
		if err := c.forgetBatch(ctx, batch, protect); err != nil {
			return err
		}
	}
	return nil
}

// CheckForget reports the error Forget would return for protected ids,
// without forgetting anything (a dry run).
func (c *Catalog) CheckForget(ctx context.Context, ids []string, protect Protect) error {
	for _, id := range ids {
		if why, ok := protect[id]; ok {
			return fmt.Errorf("catalog: forget %s: %s: %w", id[:12], why, ErrProtected)
		}
	}
	for batch := range slices.Chunk(ids, forgetBatch) {
		if _, err := c.forgetOps(ctx, batch, protect, ""); err != nil {
			return err
		}
	}
	return nil
}

// forgetBatch forgets ids in one commit, retried while heads move.
func (c *Catalog) forgetBatch(ctx context.Context, ids []string, protect Protect) error {
	return c.commitForget(ctx, func() ([]string, error) { return ids, nil }, protect, "")
}

// commitForget forgets the ids list returns (asked again at every try) in
// one commit, retried while heads move. With dropHead set, the commit also
// deletes that session's head, whose snapshot may then be among the ids.
func (c *Catalog) commitForget(ctx context.Context, list func() ([]string, error), protect Protect, dropHead string) error {
	for try := 0; ; try++ {
		ids, err := list()
		if err != nil {
			return err
		}
		ops, err := c.forgetOps(ctx, ids, protect, dropHead)
		if err != nil {
			return err
		}
		if dropHead != "" {
			raw, err := c.store.GetName(ctx, sessionName(dropHead))
			if err != nil {
				return fmt.Errorf("catalog: session %s: %w", dropHead, err)
			}
			ops = append(ops, cas.NameOp{Name: sessionName(dropHead), Expect: cas.Expect(raw)})
		}
		if len(ops) == 0 {
			return nil
		}
		err = c.commit(ctx, ops, true)
		if !errors.Is(err, ErrConflict) || try == maxForgetTries {
			if err != nil {
				return fmt.Errorf("catalog: forget: %w", err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try+1) * time.Millisecond):
		}
	}
}

// forgetOps returns the ops that forget ids: an expected delete of each
// index entry still present, and an expect-unchanged of each owner's head
// (or its absence) but dropHead's, which the caller deletes.
func (c *Catalog) forgetOps(ctx context.Context, ids []string, protect Protect, dropHead string) ([]cas.NameOp, error) {
	var ops []cas.NameOp
	owners := make(map[string]bool)
	for _, id := range ids {
		v, err := c.store.GetName(ctx, snapshotName(id))
		if errors.Is(err, cas.ErrNotFound) {
			continue // forgotten already
		}
		if err != nil {
			return nil, fmt.Errorf("catalog: forget %s: %w", id[:12], err)
		}
		owner := string(v)
		ops = append(ops, cas.NameOp{Name: snapshotName(id), Expect: cas.Expect(v)})
		owners[owner] = true
	}
	names := make([]string, 0, len(owners))
	for o := range owners {
		names = append(names, o)
	}
	slices.Sort(names)
	for _, o := range names {
		if o == dropHead || validSession(o) != nil {
			continue // a damaged index entry; nothing can name it
		}
		raw, err := c.store.GetName(ctx, sessionName(o))
		switch {
		case errors.Is(err, cas.ErrNotFound):
			ops = append(ops, cas.NameOp{Name: sessionName(o), Expect: cas.ExpectAbsent()})
			continue
		case err != nil:
			return nil, fmt.Errorf("catalog: forget: session %s: %w", o, err)
		}
		h, err := decodeStoredHead(o, raw)
		if err != nil {
			return nil, err
		}
		if h.Snapshot != "" && slices.Contains(ids, h.Snapshot) {
			return nil, fmt.Errorf("catalog: forget %s: the head of session %s (capture it again, or restore another snapshot, first): %w",
				h.Snapshot[:12], o, ErrProtected)
		}
		ops = append(ops, cas.NameOp{Name: sessionName(o), Value: raw, Expect: cas.Expect(raw)})
	}
	for _, id := range ids {
		if why, ok := protect[id]; ok {
			return nil, fmt.Errorf("catalog: forget %s: %s: %w", id[:12], why, ErrProtected)
		}
	}
	return ops, nil
}

// SessionSnapshots returns the indexed snapshots of session as policy
// candidates, reading each record for its time.
func (c *Catalog) SessionSnapshots(ctx context.Context, session string) ([]Candidate, error) {
	ids, err := c.indexedFor(ctx, session)
	if err != nil {
		return nil, err
	}
	out := make([]Candidate, 0, len(ids))
	for _, id := range ids {
		snap, err := loadRecord(ctx, c.store, id)
		if err != nil {
			return nil, err
		}
		out = append(out, Candidate{ID: id, Time: time.Unix(0, snap.CreatedNs)})
	}
	return out, nil
}

// indexedFor lists the ids indexed for session.
func (c *Catalog) indexedFor(ctx context.Context, session string) ([]string, error) {
	var ids []string
	err := c.store.ListNames(ctx, snapshotPrefix, func(key string, value []byte) error {
		if string(value) == session {
			ids = append(ids, key[len(snapshotPrefix):])
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: snapshots of %s: %w", session, err)
	}
	return ids, nil
}

// Plan applies policy to the snapshots of session and returns the
// decisions, newest first. The session's head snapshot and those in
// protect are always kept, with that reason added.
func (c *Catalog) Plan(ctx context.Context, session string, policy Policy, protect Protect, loc *time.Location) ([]Decision, error) {
	if err := validSession(session); err != nil {
		return nil, err
	}
	if err := policy.Validate(); err != nil {
		return nil, err
	}
	if policy.Empty() {
		return nil, fmt.Errorf("%w: it would forget every snapshot of %s (give --keep-last, --keep-within, --keep-daily…)", ErrNoPolicy, session)
	}
	cands, err := c.SessionSnapshots(ctx, session)
	if err != nil {
		return nil, err
	}
	if len(cands) == 0 {
		if _, err := c.Head(ctx, session); err != nil {
			return nil, fmt.Errorf("catalog: forget: %w", err)
		}
	}
	head := ""
	if h, err := c.Head(ctx, session); err == nil {
		head = h.Snapshot
	} else if !errors.Is(err, ErrNoSession) {
		return nil, err
	}
	ds := policy.Apply(cands, loc)
	for i := range ds {
		d := &ds[i]
		if d.ID == head {
			d.Reasons = append(d.Reasons, "head of session "+session)
		}
		if why, ok := protect[d.ID]; ok {
			d.Reasons = append(d.Reasons, why)
		}
		d.Keep = len(d.Reasons) > 0
	}
	return ds, nil
}

// ForgetPolicy forgets the snapshots of session that policy does not
// keep, and returns the decisions (newest first). With dryRun it only
// decides. A capture racing it adds a snapshot the plan did not see,
// which is kept.
func (c *Catalog) ForgetPolicy(ctx context.Context, session string, policy Policy, protect Protect, loc *time.Location, dryRun bool) ([]Decision, error) {
	ds, err := c.Plan(ctx, session, policy, protect, loc)
	if err != nil {
		return nil, err
	}
	if dryRun {
		return ds, nil
	}
	var drop []string
	for _, d := range ds {
		if !d.Keep {
			drop = append(drop, d.ID)
		}
	}
	if err := c.Forget(ctx, drop, protect); err != nil {
		return nil, err
	}
	return ds, nil
}

// Purge deletes session name and forgets every snapshot it captured (the
// ones indexed for it). Lineage is not ownership: a fork's head holds its
// own root, not its origin's record, so snapshots that other sessions were
// forked from go too, and those sessions' logs show their origin as
// forgotten; the trees they share stay, reached from the forks. It
// refuses, forgetting nothing, when one of the snapshots is in protect.
// The index entries go in batches of forgetBatch, each commit expecting
// the head unchanged; the last deletes the head too. A crash between
// batches leaves the session with fewer snapshots, never a head naming a
// forgotten one. It returns the ids forgotten.
func (c *Catalog) Purge(ctx context.Context, name string, protect Protect) ([]string, error) {
	h, _, err := c.readHead(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("catalog: purge: %w", err)
	}
	ids, err := c.indexedFor(ctx, name)
	if err != nil {
		return nil, err
	}
	var held []string
	for _, id := range ids {
		if why, ok := protect[id]; ok {
			held = append(held, id[:12]+" ("+why+")")
		}
	}
	if len(held) > 0 {
		return nil, fmt.Errorf("catalog: purge %s: snapshots %s: %w", name, strings.Join(held, ", "), ErrProtected)
	}
	// The head's own snapshot goes with the head, in the last batch,
	// which lists the session's snapshots again (a capture meanwhile).
	rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == h.Snapshot })
	for len(rest) > forgetBatch {
		if err := c.forgetBatch(ctx, rest[:forgetBatch], protect); err != nil {
			return nil, fmt.Errorf("catalog: purge %s: %w", name, err)
		}
		rest = rest[forgetBatch:]
	}
	var final []string
	list := func() ([]string, error) {
		var err error
		final, err = c.indexedFor(ctx, name)
		return final, err
	}
	if err := c.commitForget(ctx, list, protect, name); err != nil {
		return nil, fmt.Errorf("catalog: purge %s: %w", name, err)
	}
	for _, id := range final {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}
