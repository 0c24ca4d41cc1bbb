package catalog

import (
	"context"
	"fmt"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// CreateSessionAt creates session name whose working tree is root, a tree
// the caller has already put in full (an import). Like CreateSession it
// fails with ErrExists if the name is taken; the commit is durable and
// preceded by a store Sync, so the session never names missing objects.
func (c *Catalog) CreateSessionAt(ctx context.Context, name string, root cas.Ref) (*Head, error) {
	return c.CreateSessionAtHandles(ctx, name, root, nil)
}

// CreateSessionAtHandles is CreateSessionAt whose head also records
// provider handles (an imported native snapshot names its provider
// sessions), in the same commit.
func (c *Catalog) CreateSessionAtHandles(ctx context.Context, name string, root cas.Ref, handles map[string]manifest.Handle) (*Head, error) {
	if err := validSession(name); err != nil {
		return nil, err
	}
	if root.IsZero() {
		return nil, fmt.Errorf("catalog: create %s: zero root", name)
	}
	now := c.nowNs()
	h := &Head{Session: name, Root: root, Handles: mergeHandles(nil, handles), CreatedNs: now, UpdatedNs: now, Gen: 1}
	if err := c.insertHead(ctx, h); err != nil {
		return nil, fmt.Errorf("catalog: create %s: %w", name, err)
	}
	return h, nil
}

// IndexEntry is one indexed snapshot.
type IndexEntry struct {
	ID      string
	Session string // the session that captured it
}

// SnapshotIndex lists every indexed snapshot, by id.
func (c *Catalog) SnapshotIndex(ctx context.Context) ([]IndexEntry, error) {
	var out []IndexEntry
	err := c.store.ListNames(ctx, snapshotPrefix, func(key string, value []byte) error {
		out = append(out, IndexEntry{ID: key[len(snapshotPrefix):], Session: string(value)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("catalog: list snapshots: %w", err)
	}
	return out, nil
}
