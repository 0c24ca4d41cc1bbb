package fork

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// A provider's home is found where the session's layout records it or, for
// homes it does not record, by content: a directory holding what the
// provider puts in its home (Provider.Detect). The search looks at the
// session root and the directories up to detectDepth below it, never into
// a home it found or into directories no provider keeps a home in, so its
// cost is a few tree nodes, not the session's size.

// detectDepth is how deep below the root a home is looked for: "", "a",
// "a/b" (a home directory's ".codex").
const detectDepth = 2

// skipDirs are never searched for homes.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "sessions": true, "projects": true}

// Dir is a directory of a session tree as Detect sees it.
type Dir struct {
	ctx  context.Context
	g    cas.Getter
	tree *manifest.Tree
}

// Has returns the kind of the entry name, ok false if there is none.
func (d Dir) Has(name string) (manifest.Kind, bool) {
	i, ok := slices.BinarySearchFunc(d.tree.Entries, name, func(e manifest.Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok {
		return 0, false
	}
	return d.tree.Entries[i].Kind, true
}

// HasFile and HasDir report an entry of that kind.
func (d Dir) HasFile(name string) bool { k, ok := d.Has(name); return ok && k == manifest.KindFile }
func (d Dir) HasDir(name string) bool  { k, ok := d.Has(name); return ok && k == manifest.KindDir }

// Names lists the entries of the subdirectory name (nil if it is none).
func (d Dir) Names(name string) ([]string, error) {
	i, ok := slices.BinarySearchFunc(d.tree.Entries, name, func(e manifest.Entry, n string) int { return strings.Compare(e.Name, n) })
	if !ok || d.tree.Entries[i].Kind != manifest.KindDir {
		return nil, nil
	}
	t, err := manifest.GetTree(d.ctx, d.g, d.tree.Entries[i].Tree)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(t.Entries))
	for j, e := range t.Entries {
		names[j] = e.Name
	}
	return names, nil
}

// HomeFinder searches session trees for provider homes (Homes,
// DropDerived) and remembers which provider, if any, it found in each
// directory it looked at. A tree's ref names its content and Detect reads
// nothing but that content, so the answer for a directory of that ref and
// name never changes; and a session's next snapshot, or its fork, shares
// every directory its changes did not touch. It also remembers the
// subtrees that held no home and that no recorded place touches, so it
// does not list them again. A search then reads only the directories that
// changed since the last one: for a fork of a session holding Go's source
// tree after a change at its root, one tree instead of some sixty. The
// zero value is ready to use; a nil *HomeFinder remembers nothing. It is
// safe for concurrent use.
type HomeFinder struct {
	mu    sync.Mutex
	found map[dirKey]string     // provider found, "" if none; GUARDED_BY(mu)
	calm  map[quietKey]struct{} // subtrees that hold no home; GUARDED_BY(mu)
}

// dirKey is a directory as detect sees it: its content and its name.
type dirKey struct {
	tree cas.Ref
	base string
}

// maxRemembered bounds what a HomeFinder holds (some 100 bytes a
// directory): at that many directories it forgets them all.
const maxRemembered = 1 << 14

// quietKey is a subtree searched from a depth: its content and how deep
// below the root it starts.
type quietKey struct {
	tree  cas.Ref
	depth int
}

func (f *HomeFinder) isQuiet(k quietKey) bool {
	if f == nil {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.calm[k]
	return ok
}

func (f *HomeFinder) quiet(k quietKey) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.calm == nil || len(f.calm) >= maxRemembered {
		f.calm = make(map[quietKey]struct{})
	}
	f.calm[k] = struct{}{}
}

func (f *HomeFinder) lookup(k dirKey) (string, bool) {
	if f == nil {
		return "", false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	p, ok := f.found[k]
	return p, ok
}

func (f *HomeFinder) remember(k dirKey, provider string) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.found == nil || len(f.found) >= maxRemembered {
		f.found = make(map[dirKey]string)
	}
	f.found[k] = provider
}

// Homes returns the provider homes of the tree at root: every home layout
// records, then the homes found by content outside them, sorted by
// subtree. A found home's provider is the first registered provider
// (sorted by name) whose Detect accepts the directory, except that a
// directory named as a provider's default home goes to that provider.
func Homes(ctx context.Context, g cas.Getter, root cas.Ref, layout *manifest.Layout) ([]manifest.Place, error) {
	var f *HomeFinder
	return f.Homes(ctx, g, root, layout)
}

// Homes is the package's Homes, remembering what it finds.
func (f *HomeFinder) Homes(ctx context.Context, g cas.Getter, root cas.Ref, layout *manifest.Layout) ([]manifest.Place, error) {
	s := homeSearch{ctx: ctx, g: g, f: f, taken: make(map[string]bool)}
	for _, h := range layout.Places() {
		if h.Provider != "" {
			s.homes = append(s.homes, h)
			s.taken[h.Provider] = true
		}
	}
	s.places = layout.Places()
	if layout == nil || layout.Workspace == nil {
		// The usual workspace is never a home, recorded or not: a
		// repository may hold a config.toml beside a sessions/ directory.
		s.places = append(s.places, manifest.Place{Subtree: "workspace"})
	}
	if _, err := s.walk(root, "", 0); err != nil {
		return nil, err
	}
	slices.SortFunc(s.homes, func(a, b manifest.Place) int { return strings.Compare(a.Subtree, b.Subtree) })
	return s.homes, nil
}

// homeSearch is one search of Homes.
type homeSearch struct {
	ctx    context.Context
	g      cas.Getter
	f      *HomeFinder
	places []manifest.Place // never searched: recorded homes and the workspace
	taken  map[string]bool  // providers whose home layout records
	homes  []manifest.Place
}

func (s *homeSearch) inside(dir string) bool {
	for _, p := range s.places {
		if p.Subtree == "" || dir == p.Subtree || strings.HasPrefix(dir, p.Subtree+"/") {
			return true
		}
	}
	return false
}

// touches reports whether a place is at, above or below dir: a search of
// dir's subtree then depends on the layout, not on its content alone.
func (s *homeSearch) touches(dir string) bool {
	if dir == "" || s.inside(dir) {
		return true
	}
	for _, p := range s.places {
		if strings.HasPrefix(p.Subtree, dir+"/") {
			return true
		}
	}
	return false
}

// walk searches the directory dir, whose tree is ref, and below it. It
// reports whether any directory it looked at holds a provider's home by
// content, taken or not.
func (s *homeSearch) walk(ref cas.Ref, dir string, depth int) (bool, error) {
	if err := s.ctx.Err(); err != nil {
		return false, err
	}
	// A subtree no place touches that held no home at this depth holds
	// none now: its ref names its content.
	q := quietKey{tree: ref, depth: depth}
	free := !s.touches(dir)
	if free && s.f.isQuiet(q) {
		return false, nil
	}
	var t *manifest.Tree
	detected := false
	if !s.inside(dir) {
		k := dirKey{tree: ref, base: dir[strings.LastIndexByte(dir, '/')+1:]}
		p, ok := s.f.lookup(k)
		if !ok {
			var err error
			if t, err = s.tree(ref, dir); err != nil {
				return false, err
			}
			if p, err = detect(Dir{s.ctx, s.g, t}, k.base); err != nil {
				return false, fmt.Errorf("fork: find homes: %s: %w", displayPath(dir), err)
			}
			s.f.remember(k, p)
		}
		detected = p != ""
		if p != "" && !s.taken[p] {
			// A provider the layout records has its home there; a
			// look-alike elsewhere (a backup copy) is not it.
			s.homes = append(s.homes, manifest.Place{Subtree: dir, Provider: p})
			return true, nil
		}
	}
	if depth < detectDepth {
		if t == nil {
			var err error
			if t, err = s.tree(ref, dir); err != nil {
				return false, err
			}
		}
		for _, e := range t.Entries {
			if e.Kind == manifest.KindDir && !skipDirs[e.Name] {
				found, err := s.walk(e.Tree, joinPath(dir, e.Name), depth+1)
				if err != nil {
					return false, err
				}
				detected = detected || found
			}
		}
	}
	if free && !detected {
		s.f.quiet(q)
	}
	return detected, nil
}

func (s *homeSearch) tree(ref cas.Ref, dir string) (*manifest.Tree, error) {
	t, err := manifest.GetTree(s.ctx, s.g, ref)
	if err != nil {
		return nil, fmt.Errorf("fork: find homes: %s: %w", displayPath(dir), err)
	}
	return t, nil
}

func displayPath(p string) string {
	if p == "" {
		return "the session root"
	}
	return p
}

// detect returns the provider whose home d, named base, is; "" if none.
func detect(d Dir, base string) (string, error) {
	var found []string
	for _, name := range Providers() {
		p, _ := Lookup(name)
		if p.Detect == nil {
			continue
		}
		ok, err := p.Detect(d)
		if err != nil {
			return "", err
		}
		if ok {
			if base != "" && base == p.Home {
				return name, nil
			}
			found = append(found, name)
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	// Providers sharing a layout (codex and tutti-agent): the one whose
	// default home the directory is named after won above; else the first.
	return found[0], nil
}

// DerivedResult is what DropDerived did and what it could not do.
type DerivedResult struct {
	// Homes are the homes found (see Homes).
	Homes []manifest.Place
	// Removed are the paths of derived state removed.
	Removed []string
	// Warnings name provider state that records absolute paths and that
	// was left as it is.
	Warnings []string
}

// DropDerived removes the derived state of every provider home in session
// (see Provider.Derived and Homes) and returns the paths removed. A
// session made from another session's tree and shown at other paths needs
// it before a harness runs there: Codex would otherwise follow the
// absolute paths its state_5.sqlite recorded back into the source. Homes
// of providers that key their sessions on absolute paths (Provider.KeysOn)
// get a warning when the layout gives no canonical path to show them at.
func DropDerived(ctx context.Context, env Env, session string, layout *manifest.Layout) (DerivedResult, error) {
	var f *HomeFinder
	return f.DropDerived(ctx, env, session, layout)
}

// DropDerived is the package's DropDerived, remembering the homes it
// searched for.
func (f *HomeFinder) DropDerived(ctx context.Context, env Env, session string, layout *manifest.Layout) (DerivedResult, error) {
	var res DerivedResult
	root, err := env.Root(ctx, session)
	if err != nil {
		return res, err
	}
	if res.Homes, err = f.Homes(ctx, env, root, layout); err != nil {
		return res, err
	}
	for _, h := range res.Homes {
		p, err := Lookup(h.Provider)
		if errors.Is(err, ErrUnknownProvider) {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s: home of provider %q, which homefs does not know: any absolute path it stores is valid only through homefs run at the session's canonical paths", displayPath(h.Subtree), h.Provider))
			continue
		}
		for _, d := range p.Derived {
			fp := joinPath(h.Subtree, d)
			e, err := lookup(ctx, env, root, fp)
			if err != nil {
				return res, err
			}
			if e == nil {
				continue
			}
			if err := env.Remove(ctx, session, fp); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return res, fmt.Errorf("fork: drop derived state %s: %w", fp, err)
			}
			res.Removed = append(res.Removed, fp)
		}
		if p.KeysOn != "" && (layout == nil || layout.Workspace == nil || layout.Workspace.At == "") {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s: %s home: %s keys its sessions on the %s; the session records no canonical workspace path (session set --workspace-at), so resume them through homefs run only once it does", displayPath(h.Subtree), p.Name, p.Name, p.KeysOn))
		}
	}
	return res, nil
}
