package fork

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// rollout is a provider session's rollout found in a session tree.
type rollout struct {
	Path  string // relative to the session root
	Rel   string // relative to the provider's home
	Entry manifest.Entry
	Info  RolloutInfo
}

// lookup returns the entry at path below root, nil if there is none (or a
// segment on the way is not a directory).
func lookup(ctx context.Context, g cas.Getter, root cas.Ref, p string) (*manifest.Entry, error) {
	ref := root
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		t, err := manifest.GetTree(ctx, g, ref)
		if err != nil {
			return nil, err
		}
		j, ok := slices.BinarySearchFunc(t.Entries, seg, func(e manifest.Entry, name string) int {
			return strings.Compare(e.Name, name)
		})
		if !ok {
			return nil, nil
		}
		e := &t.Entries[j]
		if i == len(segs)-1 {
			return e, nil
		}
		if e.Kind != manifest.KindDir {
			return nil, nil
		}
		ref = e.Tree
	}
	return nil, nil
}

// joinPath joins slash-separated session paths; "" is the root.
func joinPath(dir, name string) string {
	switch {
	case dir == "":
		return name
	case name == "":
		return dir
	}
	return dir + "/" + name
}

// escapeGlob quotes the metacharacters of path.Match in s.
func escapeGlob(s string) string {
	var b strings.Builder
	for _, c := range s {
		if strings.ContainsRune(`\*?[]`, c) {
			b.WriteByte('\\')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// candidates lists the regular files below the provider's home whose path
// matches one of its patterns for id, sorted by path. Symlinks never match.
func candidates(ctx context.Context, g cas.Getter, root cas.Ref, p Provider, id string) ([]rollout, error) {
	homeTree := root
	if p.Home != "" {
		home, err := lookup(ctx, g, root, p.Home)
		if err != nil || home == nil || home.Kind != manifest.KindDir {
			return nil, err
		}
		homeTree = home.Tree
	}
	seen := make(map[string]bool)
	var out []rollout
	for _, pat := range p.Patterns {
		segs := strings.Split(strings.ReplaceAll(pat, "{id}", escapeGlob(id)), "/")
		err := matchTree(ctx, g, homeTree, "", segs, func(rel string, e *manifest.Entry) {
			fp := joinPath(p.Home, rel)
			if !seen[fp] {
				seen[fp] = true
				out = append(out, rollout{Path: fp, Rel: rel, Entry: *e})
			}
		})
		if err != nil {
			return nil, err
		}
	}
	slices.SortFunc(out, func(a, b rollout) int { return strings.Compare(a.Path, b.Path) })
	return out, nil
}

// maxPatternDepth bounds how deep a "**" descends.
const maxPatternDepth = 32

func matchTree(ctx context.Context, g cas.Getter, ref cas.Ref, dir string, segs []string, fn func(string, *manifest.Entry)) error {
	return matchTreeDepth(ctx, g, ref, dir, segs, fn, 0)
}

func matchTreeDepth(ctx context.Context, g cas.Getter, ref cas.Ref, dir string, segs []string, fn func(string, *manifest.Entry), depth int) error {
	if depth > maxPatternDepth {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	t, err := manifest.GetTree(ctx, g, ref)
	if err != nil {
		return fmt.Errorf("fork: %s: %w", dir, err)
	}
	seg, rest := segs[0], segs[1:]
	if seg == "**" {
		if err := matchTreeDepth(ctx, g, ref, dir, rest, fn, depth); err != nil {
			return err
		}
		for i := range t.Entries {
			if e := &t.Entries[i]; e.Kind == manifest.KindDir {
				if err := matchTreeDepth(ctx, g, e.Tree, joinPath(dir, e.Name), segs, fn, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		if ok, _ := path.Match(seg, e.Name); !ok {
			continue
		}
		switch {
		case len(rest) == 0 && e.Kind == manifest.KindFile:
			fn(joinPath(dir, e.Name), e)
		case len(rest) > 0 && e.Kind == manifest.KindDir:
			if err := matchTreeDepth(ctx, g, e.Tree, joinPath(dir, e.Name), rest, fn, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// located is the outcome of looking for one provider session's rollout.
type located struct {
	matches []rollout // name and identity match
	// unreadable are name matches whose first record is damaged, so their
	// identity cannot be read; others are name matches naming another id.
	unreadable, others []string
}

// locate finds the rollouts of id in the session tree root: files whose
// name matches and whose first record(s) carry id.
func locate(ctx context.Context, g cas.Getter, root cas.Ref, p Provider, id string) (located, error) {
	var l located
	cands, err := candidates(ctx, g, root, p, id)
	if err != nil {
		return l, err
	}
	for _, c := range cands {
		info, err := ReadIdentity(ctx, g, p, &c.Entry)
		switch {
		case err != nil && !isDamaged(err):
			return l, err
		case err != nil || !info.HasIdentity && info.FirstDamaged >= 0:
			l.unreadable = append(l.unreadable, c.Path)
		case !info.HasIdentity || info.Identity.ID != id:
			l.others = append(l.others, c.Path)
		default:
			c.Info = info
			l.matches = append(l.matches, c)
		}
	}
	return l, nil
}
