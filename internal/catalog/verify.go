package catalog

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// ChunkChecker is what VerifyComplete needs of a store.
type ChunkChecker interface {
	cas.Getter
	cas.HasManyer
}

// ReachReader is what Reachable needs of a store.
type ReachReader interface {
	cas.Getter
	cas.Names
}

const (
	// hasBatch is how many refs VerifyComplete asks HasMany about at once.
	hasBatch = 1024
	// maxMissingReported bounds the refs a VerifyComplete error lists.
	maxMissingReported = 8
)

type missingRef struct {
	ref  cas.Ref
	kind manifest.RefKind
	path string
}

// VerifyComplete checks that every object reachable from root is in store:
// tree and index nodes are read and decoded (so their hashes are checked),
// chunks are checked for presence in batches. A missing object yields an
// error wrapping cas.ErrNotFound that lists the first ones with their
// paths; a missing tree or index node ends the walk, since what lies below
// it is unknown. Each distinct ref is checked once.
func VerifyComplete(ctx context.Context, store ChunkChecker, root cas.Ref) error {
	var (
		seen    = make(map[cas.Ref]struct{})
		pending []missingRef
		missing []missingRef
		nMiss   int
	)
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		refs := make([]cas.Ref, len(pending))
		for i, p := range pending {
			refs[i] = p.ref
		}
		has, err := store.HasMany(ctx, refs)
		if err != nil {
			return err
		}
		if len(has) != len(refs) {
			return fmt.Errorf("store answered %d of %d refs", len(has), len(refs))
		}
		for i, ok := range has {
			if !ok {
				nMiss++
				if len(missing) < maxMissingReported {
					missing = append(missing, pending[i])
				}
			}
		}
		pending = pending[:0]
		return nil
	}
	walkErr := manifest.WalkRefs(ctx, store, root, func(ref cas.Ref, kind manifest.RefKind, path string) error {
		if _, ok := seen[ref]; ok {
			return manifest.SkipSubtree
		}
		seen[ref] = struct{}{}
		if kind != manifest.Chunk {
			return nil // read by the walk itself
		}
		pending = append(pending, missingRef{ref, kind, path})
		if len(pending) >= hasBatch {
			return flush()
		}
		return nil
	})
	if walkErr != nil && !errors.Is(walkErr, cas.ErrNotFound) {
		return fmt.Errorf("catalog: verify %s: %w", root.Short(), walkErr)
	}
	if err := flush(); err != nil {
		return fmt.Errorf("catalog: verify %s: %w", root.Short(), err)
	}
	if nMiss == 0 && walkErr == nil {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "catalog: verify %s: ", root.Short())
	if nMiss > 0 {
		fmt.Fprintf(&b, "%d missing chunks (", nMiss)
		for i, m := range missing {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s of %q", m.ref.Short(), m.path)
		}
		if nMiss > len(missing) {
			b.WriteString(", …")
		}
		b.WriteString(")")
	}
	if walkErr != nil {
		if nMiss > 0 {
			b.WriteString("; ")
		}
		// walkErr names the node and its path, and wraps ErrNotFound.
		return fmt.Errorf("%swalk stopped: %w", b.String(), walkErr)
	}
	return fmt.Errorf("%s: %w", b.String(), cas.ErrNotFound)
}

// Reachable calls fn once for every ref reachable from the catalog in
// store: each session head's root tree, and the record and root tree of
// every snapshot that is indexed or is a head's last snapshot.
// Unreferenced chunks (candidates for gc) are exactly those fn never sees.
// Lineage links do not reach: a record's Parent and Origin, and a head's
// Origin, name snapshots that may have been forgotten (their index entry
// removed), and a forgotten snapshot's record and tree go once nothing
// else reaches them. Any unreadable head, or record or node of a reached
// snapshot, is an error: a collector must not run on a catalog it cannot
// read in full.
func Reachable(ctx context.Context, store ReachReader, fn func(cas.Ref) error) error {
	seen := make(map[cas.Ref]struct{})
	walk := func(root cas.Ref) error {
		return manifest.WalkRefs(ctx, store, root, func(ref cas.Ref, _ manifest.RefKind, _ string) error {
			if _, ok := seen[ref]; ok {
				return manifest.SkipSubtree
			}
			seen[ref] = struct{}{}
			return fn(ref)
		})
	}

	// Collect names first so that no store work runs inside ListNames.
	var roots []cas.Ref
	var queue []string
	err := store.ListNames(ctx, sessionPrefix, func(key string, value []byte) error {
		h, err := decodeStoredHead(key[len(sessionPrefix):], value)
		if err != nil {
			return err
		}
		roots = append(roots, h.Root)
		if h.Snapshot != "" {
			// Indexed too, unless the index was damaged: keep it anyway.
			queue = append(queue, h.Snapshot)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("catalog: reachable: %w", err)
	}
	err = store.ListNames(ctx, snapshotPrefix, func(key string, _ []byte) error {
		id := key[len(snapshotPrefix):]
		if !isFullID(id) {
			return fmt.Errorf("%w: bad index entry %q", cas.ErrCorrupt, key)
		}
		queue = append(queue, id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("catalog: reachable: %w", err)
	}

	for _, root := range roots {
		if err := walk(root); err != nil {
			return fmt.Errorf("catalog: reachable: %w", err)
		}
	}
	done := make(map[string]bool)
	for len(queue) > 0 {
		id := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		if done[id] {
			continue
		}
		done[id] = true
		snap, err := loadRecord(ctx, store, id)
		if err != nil {
			return fmt.Errorf("catalog: reachable: %w", err)
		}
		rec := cas.MustParseRef("sha256:" + id)
		if _, ok := seen[rec]; !ok {
			seen[rec] = struct{}{}
			if err := fn(rec); err != nil {
				return err
			}
		}
		if err := walk(snap.Root); err != nil {
			return fmt.Errorf("catalog: reachable: snapshot %s: %w", id, err)
		}
	}
	return nil
}
