package remote

import (
	"context"
	"slices"

	"github.com/homefs/homefs/cas"
)

// listMinRefs is the smallest batch for which present() lists the chunks
// directory instead of asking object by object; listPerRefs bounds the
// listing to one page (1000 keys) per that many refs asked about, so a
// listing never costs more requests than it saves.
const (
	listMinRefs = 512
	listPerRefs = 100
)

// present reports which refs the remote holds. Large batches first list
// the chunks directory (keys come in order, a thousand per request) for a
// bounded number of pages: every ref below the last key listed is
// answered from the listing; the rest, and small batches, are asked with
// HeadObject, Parallel at a time.
func (r *Remote) present(ctx context.Context, refs []cas.Ref) ([]bool, error) {
	has := make([]bool, len(refs))
	ask := make([]int, 0, len(refs))
	if len(refs) >= listMinRefs {
		listed, last, err := r.listChunks(ctx, len(refs)/listPerRefs)
		if err != nil {
			return nil, err
		}
		for i, ref := range refs {
			switch h := r.chunkName(ref); {
			case listed[h]:
				has[i] = true
			case last != "" && h <= last:
				// Listed range, not in it: absent.
			default:
				ask = append(ask, i)
			}
		}
	} else {
		for i := range refs {
			ask = append(ask, i)
		}
	}
	sub := make([]cas.Ref, len(ask))
	for j, i := range ask {
		sub[j] = refs[i]
	}
	got, err := r.HasChunks(ctx, sub)
	if err != nil {
		return nil, err
	}
	for j, i := range ask {
		has[i] = got[j]
	}
	return has, nil
}

// listChunks lists chunk keys for at most pages pages. It returns the
// object names seen (chunkName of their refs) and the last name covered:
// "" if nothing was listed, or "~" (above every hex digit) if the listing
// reached the end.
func (r *Remote) listChunks(ctx context.Context, pages int) (map[string]bool, string, error) {
	seen := make(map[string]bool)
	last := ""
	complete, err := r.list(ctx, chunksDir, "", max(pages, 1), func(name string) error {
		seen[name] = true
		last = name
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	if complete {
		last = "~"
	}
	return seen, last, nil
}

// sortedRefs returns the set's refs in order (deterministic requests).
func sortedRefs(set map[cas.Ref]struct{}) []cas.Ref {
	out := make([]cas.Ref, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b cas.Ref) int { return slices.Compare(a[:], b[:]) })
	return out
}
