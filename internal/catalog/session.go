package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
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
	return c.CreateSessionWith(ctx, name, from, CreateOptions{})
}

// CreateOptions are the optional parts of a new session.
type CreateOptions struct {
	// Layout, when set, is the session's layout; otherwise a session
	// created from a snapshot takes the snapshot's.
	Layout *manifest.Layout
	// Owner, when set, owns the session's root directory (mode 0755 in
	// an empty session; a snapshot's root keeps its mode).
	Owner *Owner
}

// Owner is a uid and gid.
type Owner struct{ UID, GID uint32 }

// CreateSessionWith is CreateSession with options.
func (c *Catalog) CreateSessionWith(ctx context.Context, name, from string, opts CreateOptions) (*Head, error) {
	if err := validSession(name); err != nil {
		return nil, err
	}
	if err := opts.Layout.Validate(); err != nil {
		return nil, fmt.Errorf("catalog: create %s: %w", name, err)
	}
	now := c.nowNs()
	h := &Head{Session: name, CreatedNs: now, UpdatedNs: now, Gen: 1}
	if from == "" {
		t := &manifest.Tree{}
		if o := opts.Owner; o != nil {
			t.Self = &manifest.DirAttr{Mode: 0o755, UID: o.UID, GID: o.GID, MtimeNs: now, CtimeNs: now, BtimeNs: now}
		}
		root, err := manifest.PutTree(ctx, c.store, t)
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
		h.Layout = snap.Layout.Clone()
		if o := opts.Owner; o != nil {
			if h.Root, err = chownRoot(ctx, c.store, snap.Root, *o, now); err != nil {
				return nil, fmt.Errorf("catalog: create %s: %w", name, err)
			}
		}
	}
	if opts.Layout != nil {
		h.Layout = opts.Layout.Clone()
	}
	if h.Layout.IsEmpty() {
		h.Layout = nil
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
		Layout:    snap.Layout.Clone(),
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
	if h.Layout == nil {
		// A session keeps its own layout; one without takes the
		// snapshot's (a session pulled from another host).
		h.Layout = snap.Layout.Clone()
	}
	h.UpdatedNs = c.nowNs()
	h.Gen++
	if err := c.replaceHead(ctx, h, raw, nil, true); err != nil {
		return nil, fmt.Errorf("catalog: restore %s to %s: %w", session, id, err)
	}
	return h, nil
}

// SetLayout records layout as the layout of session name, durably (nil or
// empty clears it), and returns the new head. The next capture records
// it.
func (c *Catalog) SetLayout(ctx context.Context, name string, layout *manifest.Layout) (*Head, error) {
	if err := layout.Validate(); err != nil {
		return nil, fmt.Errorf("catalog: set layout of %s: %w", name, err)
	}
	h, raw, err := c.readHead(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("catalog: set layout: %w", err)
	}
	h.Layout = layout.Clone()
	if h.Layout.IsEmpty() {
		h.Layout = nil
	}
	h.UpdatedNs = c.nowNs()
	h.Gen++
	if err := c.replaceHead(ctx, h, raw, nil, true); err != nil {
		return nil, fmt.Errorf("catalog: set layout of %s: %w", name, err)
	}
	return h, nil
}

// chownRoot returns the root of a tree equal to root's but for its own
// owner. It costs one tree node.
func chownRoot(ctx context.Context, store cas.Store, root cas.Ref, o Owner, now int64) (cas.Ref, error) {
	t, err := manifest.GetTree(ctx, store, root)
	if err != nil {
		return cas.Ref{}, fmt.Errorf("read root: %w", err)
	}
	self := manifest.DirAttr{Mode: 0o755, MtimeNs: now}
	if t.Self != nil {
		self = *t.Self
	}
	self.UID, self.GID, self.CtimeNs = o.UID, o.GID, now
	t.Self = &self
	return manifest.PutTree(ctx, store, t)
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
