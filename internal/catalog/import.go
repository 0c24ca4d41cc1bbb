package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// AddSnapshot registers a snapshot record that was captured elsewhere (a
// pull from a remote): it stores the record and indexes it under its id, in
// one durable commit. The caller must have stored the record's tree, and
// registered its Parent and Origin snapshots first, so that the catalog
// stays closed under lineage (Reachable reads every record it names).
// Adding a snapshot already indexed for the same session is a no-op.
func (c *Catalog) AddSnapshot(ctx context.Context, record []byte) (*manifest.Snapshot, string, error) {
	snap, err := manifest.DecodeSnapshot(record)
	if err != nil {
		return nil, "", fmt.Errorf("catalog: add snapshot: %w", err)
	}
	id := manifest.SnapshotID(record)
	for _, dep := range []string{snap.Parent, originID(snap)} {
		if dep == "" {
			continue
		}
		if _, err := c.store.GetName(ctx, snapshotName(dep)); err != nil {
			if errors.Is(err, cas.ErrNotFound) {
				return nil, "", fmt.Errorf("catalog: add snapshot %s: lineage snapshot %s is not registered: %w", id, dep, ErrNoSnapshot)
			}
			return nil, "", fmt.Errorf("catalog: add snapshot %s: %w", id, err)
		}
	}
	cur, err := c.store.GetName(ctx, snapshotName(id))
	switch {
	case err == nil && string(cur) == snap.Session:
		return snap, id, nil
	case err == nil:
		return nil, "", fmt.Errorf("catalog: add snapshot %s: %w: indexed for session %q, record says %q",
			id, cas.ErrCorrupt, cur, snap.Session)
	case !errors.Is(err, cas.ErrNotFound):
		return nil, "", fmt.Errorf("catalog: add snapshot %s: %w", id, err)
	}
	ref, err := c.store.Put(ctx, record)
	if err != nil {
		return nil, "", fmt.Errorf("catalog: add snapshot %s: put record: %w", id, err)
	}
	if ref.Hex() != id {
		return nil, "", fmt.Errorf("catalog: add snapshot %s: store put the record as %s", id, ref.Short())
	}
	op := cas.NameOp{Name: snapshotName(id), Value: []byte(snap.Session)}
	if err := c.commit(ctx, []cas.NameOp{op}, true); err != nil {
		return nil, "", fmt.Errorf("catalog: add snapshot %s: %w", id, err)
	}
	return snap, id, nil
}

// HasSnapshot reports whether the full id is indexed.
func (c *Catalog) HasSnapshot(ctx context.Context, id string) (bool, error) {
	if !isFullID(id) {
		return false, fmt.Errorf("catalog: snapshot %q: want %d hex digits: %w", id, idLen, ErrNoSnapshot)
	}
	_, err := c.store.GetName(ctx, snapshotName(id))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, cas.ErrNotFound):
		return false, nil
	}
	return false, fmt.Errorf("catalog: snapshot %s: %w", id, err)
}

// Record returns the stored bytes of snapshot id's record (a full id),
// checked against the id.
func (c *Catalog) Record(ctx context.Context, id string) ([]byte, *manifest.Snapshot, error) {
	ref, err := cas.ParseRef("sha256:" + id)
	if err != nil {
		return nil, nil, fmt.Errorf("catalog: snapshot %q: %w", id, ErrNoSnapshot)
	}
	data, err := c.store.Get(ctx, ref)
	if err != nil {
		return nil, nil, fmt.Errorf("catalog: snapshot %s: record: %w", id, err)
	}
	snap, err := loadRecordBytes(id, data)
	if err != nil {
		return nil, nil, err
	}
	return data, snap, nil
}

func loadRecordBytes(id string, data []byte) (*manifest.Snapshot, error) {
	if got := manifest.SnapshotID(data); got != id {
		return nil, fmt.Errorf("catalog: snapshot %s: %w: record hashes to %s", id, cas.ErrCorrupt, got)
	}
	snap, err := manifest.DecodeSnapshot(data)
	if errors.Is(err, manifest.ErrUnsupportedVersion) {
		// A later homefs wrote it (a remote's record): not damage.
		return nil, fmt.Errorf("catalog: snapshot %s: %w (upgrade homefs to read it)", id, err)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: snapshot %s: %w: %w", id, cas.ErrCorrupt, err)
	}
	return snap, nil
}

func originID(s *manifest.Snapshot) string {
	if s.Origin == nil {
		return ""
	}
	return s.Origin.Snapshot
}
