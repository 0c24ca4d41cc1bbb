package fsck

import (
	"context"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// Stats describes a store.
type Stats struct {
	Sessions    int     `json:"sessions"`
	Snapshots   int     `json:"snapshots"`
	Chunks      int64   `json:"chunks"`            // distinct objects stored (chunks and nodes)
	PlainBytes  int64   `json:"plain_bytes"`       // their uncompressed size
	StoredBytes int64   `json:"stored_bytes"`      // their size after compression
	Logical     int64   `json:"logical_bytes"`     // file bytes over every session and snapshot
	Dedup       float64 `json:"dedup_ratio"`       // Logical / PlainBytes
	Compression float64 `json:"compression_ratio"` // PlainBytes / StoredBytes
}

// Measure computes Stats. Logical sizes are memoized by tree ref, so its
// cost is the distinct trees, not their number of appearances.
func Measure(ctx context.Context, st Store, cat *catalog.Catalog) (*Stats, error) {
	s := &Stats{}
	heads, err := cat.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	idx, err := cat.SnapshotIndex(ctx)
	if err != nil {
		return nil, err
	}
	s.Sessions, s.Snapshots = len(heads), len(idx)
	memo := make(map[cas.Ref]int64)
	for _, h := range heads {
		n, err := logical(ctx, st, h.Root, memo)
		if err != nil {
			return nil, err
		}
		s.Logical += n
	}
	for _, e := range idx {
		snap, _, err := cat.Snapshot(ctx, e.ID)
		if err != nil {
			return nil, err
		}
		n, err := logical(ctx, st, snap.Root, memo)
		if err != nil {
			return nil, err
		}
		s.Logical += n
	}
	err = st.Enumerate(ctx, func(ci cas.ChunkInfo) error {
		s.Chunks++
		s.PlainBytes += ci.Size
		s.StoredBytes += ci.StoredSize
		return nil
	})
	if err != nil {
		return nil, err
	}
	if s.PlainBytes > 0 {
		s.Dedup = float64(s.Logical) / float64(s.PlainBytes)
	}
	if s.StoredBytes > 0 {
		s.Compression = float64(s.PlainBytes) / float64(s.StoredBytes)
	}
	return s, nil
}

func logical(ctx context.Context, g cas.Getter, ref cas.Ref, memo map[cas.Ref]int64) (int64, error) {
	if n, ok := memo[ref]; ok {
		return n, nil
	}
	t, err := manifest.GetTree(ctx, g, ref)
	if err != nil {
		return 0, err
	}
	var n int64
	for i := range t.Entries {
		e := &t.Entries[i]
		switch e.Kind {
		case manifest.KindFile:
			n += e.Size
		case manifest.KindDir:
			m, err := logical(ctx, g, e.Tree, memo)
			if err != nil {
				return 0, err
			}
			n += m
		}
	}
	memo[ref] = n
	return n, nil
}
