package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"

	"homefs/cas"
	"homefs/manifest"
)

// readHead returns the head of name and its stored bytes (for Expect).
func (c *Catalog) readHead(ctx context.Context, name string) (*Head, []byte, error) {
	if err := validSession(name); err != nil {
		return nil, nil, err
	}
	raw, err := c.store.GetName(ctx, sessionName(name))
	if errors.Is(err, cas.ErrNotFound) {
		return nil, nil, fmt.Errorf("catalog: session %s: %w", name, ErrNoSession)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("catalog: session %s: %w", name, err)
	}
	h, err := decodeStoredHead(name, raw)
	if err != nil {
		return nil, nil, err
	}
	return h, raw, nil
}

// decodeStoredHead decodes the value of session/<name>; anything that does
// not decode to a head of that name is corruption.
func decodeStoredHead(name string, raw []byte) (*Head, error) {
	h, err := DecodeHead(raw)
	if err != nil {
		return nil, fmt.Errorf("catalog: session %s: %w: %w", name, cas.ErrCorrupt, err)
	}
	if h.Session != name {
		return nil, fmt.Errorf("catalog: session %s: %w: head names session %q", name, cas.ErrCorrupt, h.Session)
	}
	return h, nil
}

// Head returns the head of session name.
func (c *Catalog) Head(ctx context.Context, name string) (*Head, error) {
	h, _, err := c.readHead(ctx, name)
	return h, err
}

// Sessions returns every session's head, sorted by name.
func (c *Catalog) Sessions(ctx context.Context) ([]Head, error) {
	var heads []Head
	err := c.store.ListNames(ctx, sessionPrefix, func(key string, value []byte) error {
		name := key[len(sessionPrefix):]
		h, err := decodeStoredHead(name, value)
		if err != nil {
			return err
		}
		heads = append(heads, *h)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: list sessions: %w", err)
	}
	return heads, nil
}

// CreateSession creates session name. With from empty its tree is empty;
// otherwise from is a snapshot id (or unique prefix) whose root the session
// starts with, and Origin records it. Unlike Fork, the snapshot's provider
// handles are not copied: the new session starts its own conversations.
func (c *Catalog) CreateSession(ctx context.Context, name, from string) (*Head, error) {
	if err := validSession(name); err != nil {
		return nil, err
	}
	now := c.nowNs()
	h := &Head{Session: name, CreatedNs: now, UpdatedNs: now, Gen: 1}
	if from == "" {
		root, err := manifest.PutTree(ctx, c.store, &manifest.Tree{})
		if err != nil {
			return nil, fmt.Errorf("catalog: create %s: empty tree: %w", name, err)
		}
		h.Root = root
	} else {
		snap, id, err := c.Snapshot(ctx, from)
		if err != nil {
			return nil, fmt.Errorf("catalog: create %s from %s: %w", name, from, err)
		}
		h.Root = snap.Root
		h.Origin = &manifest.Lineage{Session: snap.Session, Snapshot: id}
	}
	if err := c.insertHead(ctx, h); err != nil {
		return nil, fmt.Errorf("catalog: create %s: %w", name, err)
	}
	return h, nil
}

// insertHead stores a new head, failing with ErrExists if the name is
// taken (atomically: the commit expects the name absent).
func (c *Catalog) insertHead(ctx context.Context, h *Head) error {
	enc, err := EncodeHead(h)
	if err != nil {
		return err
	}
	err = c.commit(ctx, []cas.NameOp{{
		Name: sessionName(h.Session), Value: enc, Expect: cas.ExpectAbsent(),
	}}, true)
	if errors.Is(err, cas.ErrConflict) {
		return ErrExists
	}
	return err
}

// replaceHead stores h in place of the head whose stored bytes are old.
func (c *Catalog) replaceHead(ctx context.Context, h *Head, old []byte, extra []cas.NameOp, durable bool) error {
	enc, err := EncodeHead(h)
	if err != nil {
		return err
	}
	ops := append([]cas.NameOp{{
		Name: sessionName(h.Session), Value: enc, Expect: cas.Expect(bytes.Clone(old)),
	}}, extra...)
	return c.commit(ctx, ops, durable)
}

// DeleteSession removes the head of session name. Its snapshots stay.
func (c *Catalog) DeleteSession(ctx context.Context, name string) error {
	_, raw, err := c.readHead(ctx, name)
	if err != nil {
		return fmt.Errorf("catalog: delete: %w", err)
	}
	err = c.commit(ctx, []cas.NameOp{{Name: sessionName(name), Expect: cas.Expect(raw)}}, true)
	if err != nil {
		return fmt.Errorf("catalog: delete %s: %w", name, err)
	}
	return nil
}

// SetRoot records root as the working tree of session name, provided the
// head is still at generation gen; otherwise it fails with ErrConflict. It
// returns the new head (Gen+1). The filesystem calls it after a flush, with
// durable set when the flush backs an fsync.
func (c *Catalog) SetRoot(ctx context.Context, name string, gen uint64, root cas.Ref, durable bool) (*Head, error) {
	if root.IsZero() {
		return nil, fmt.Errorf("catalog: set root of %s: zero root", name)
	}
	h, raw, err := c.readHead(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("catalog: set root: %w", err)
	}
	if h.Gen != gen {
		return nil, fmt.Errorf("catalog: set root of %s: at gen %d, caller has %d: %w", name, h.Gen, gen, ErrConflict)
	}
	h.Root = root
	h.UpdatedNs = c.nowNs()
	h.Gen++
	if err := c.replaceHead(ctx, h, raw, nil, durable); err != nil {
		return nil, fmt.Errorf("catalog: set root of %s: %w", name, err)
	}
	return h, nil
}

// Fork creates session target from snapshot snapID (an id or unique
// prefix): its root is the snapshot's root, its Origin the snapshot, and
// its handles the snapshot's. It costs O(1): trees are shared, not copied.
// It fails with ErrExists if target exists, ErrSameSession if target is
// the session the snapshot belongs to.
func (c *Catalog) Fork(ctx context.Context, snapID, target string) (*Head, error) {
	if err := validSession(target); err != nil {
		return nil, fmt.Errorf("catalog: fork %s → %s: %w", snapID, target, err)
	}
	snap, id, err := c.Snapshot(ctx, snapID)
	if err != nil {
		return nil, fmt.Errorf("catalog: fork %s → %s: %w", snapID, target, err)
	}
	if snap.Session == target {
		return nil, fmt.Errorf("catalog: fork %s → %s: %w", id, target, ErrSameSession)
	}
	now := c.nowNs()
	h := &Head{
		Session:   target,
		Root:      snap.Root,
		Origin:    &manifest.Lineage{Session: snap.Session, Snapshot: id},
		Handles:   maps.Clone(snap.Handles),
		CreatedNs: now,
		UpdatedNs: now,
		Gen:       1,
	}
	if err := c.insertHead(ctx, h); err != nil {
		return nil, fmt.Errorf("catalog: fork %s → %s: %w", id, target, err)
	}
	return h, nil
}

// Restore points session at snapshot snapID (an id or unique prefix): the
// head's root becomes the snapshot's root, and the next capture's Parent
// the snapshot. A snapshot of another session is restored like a fork in
// place: the head's Snapshot is cleared and Origin set, so the record of
// the next capture keeps Parent within one session. The commit is durable
// and expects the head as read (ErrConflict if it moved meanwhile).
// Callers check the tree with VerifyComplete first.
func (c *Catalog) Restore(ctx context.Context, session, snapID string) (*Head, error) {
	h, raw, err := c.readHead(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("catalog: restore: %w", err)
	}
	snap, id, err := c.Snapshot(ctx, snapID)
	if err != nil {
		return nil, fmt.Errorf("catalog: restore %s to %s: %w", session, snapID, err)
	}
	h.Root = snap.Root
	if snap.Session == session {
		h.Snapshot = id
	} else {
		h.Snapshot = ""
		h.Origin = &manifest.Lineage{Session: snap.Session, Snapshot: id}
	}
	h.Handles = maps.Clone(snap.Handles)
	h.UpdatedNs = c.nowNs()
	h.Gen++
	if err := c.replaceHead(ctx, h, raw, nil, true); err != nil {
		return nil, fmt.Errorf("catalog: restore %s to %s: %w", session, id, err)
	}
	return h, nil
}

// SetHandles merges handles into the head of session name (a provider
// session bound or resumed there), durably. It returns the new head.
func (c *Catalog) SetHandles(ctx context.Context, name string, handles map[string]manifest.Handle) (*Head, error) {
	h, raw, err := c.readHead(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("catalog: set handles: %w", err)
	}
	h.Handles = mergeHandles(h.Handles, handles)
	h.UpdatedNs = c.nowNs()
	h.Gen++
	if err := c.replaceHead(ctx, h, raw, nil, true); err != nil {
		return nil, fmt.Errorf("catalog: set handles of %s: %w", name, err)
	}
	return h, nil
}
