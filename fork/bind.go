package fork

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// BindRequest asks to bind provider session ID of Provider from session
// Source into session Target.
type BindRequest struct {
	Provider string
	ID       string
	Source   string
	Target   string
	// SourceHome and TargetHome are where the provider's home lies in
	// each session ("." for the session root); "" means the provider's
	// default (Provider.Home). A rollout added to the target lands at the
	// same path below the target's home as below the source's.
	SourceHome, TargetHome string
}

// AtHome returns p with its home at home ("." for the session root, ""
// to keep p's default).
func AtHome(p Provider, home string) Provider {
	switch home {
	case "":
	case ".":
		p.Home = ""
	default:
		p.Home = home
	}
	return p
}

// Action is what binding did with one rollout.
type Action string

const (
	// ActionIdentical: the target already held the same bytes.
	ActionIdentical Action = "identical"
	// ActionKeep: the target's rollout extends the source's; it was kept.
	ActionKeep Action = "keep"
	// ActionAdd: the target had no rollout for the id; the source's was
	// placed at the same path.
	ActionAdd Action = "add"
	// ActionReplace: the target's rollout was a strict prefix of the
	// source's (a cut-short copy, damaged or not); the source's replaced it.
	ActionReplace Action = "replace"
)

// Bound is one rollout bound into the target.
type Bound struct {
	ID         string `json:"id"`
	SourcePath string `json:"source_path"`
	Path       string `json:"path"` // in the target
	Action     Action `json:"action"`
	Size       int64  `json:"size"` // the source's
}

// BindResult says what Bind did.
type BindResult struct {
	Provider string `json:"provider"`
	// Rollouts are the bound rollouts, ancestors first, the requested
	// provider session last.
	Rollouts []Bound `json:"rollouts"`
	// Handle is what the target's handle for Provider now says.
	Handle manifest.Handle `json:"handle"`
	// Removed lists the derived-state files dropped from the target.
	Removed []string `json:"removed,omitempty"`
}

// maxChain bounds a Codex ancestor chain; maxAttempts the re-plans after
// the target changed under Bind.
const (
	maxChain    = 64
	maxAttempts = 4
)

// Bind binds a provider session, and for Codex the ancestors it was forked
// from, from req.Source into req.Target by reference. The rules:
//
//   - Source and Target differ; the id is non-empty once trimmed.
//   - The source holds exactly one rollout for the id: a regular file
//     (symlinks are ignored) whose name matches the provider's patterns
//     and whose first record(s) carry the id. It must not be damaged.
//   - What the target holds for the id is reconciled: identical or longer
//     (the source is a prefix of it) is kept; a strict prefix of the
//     source, damaged or not, is replaced; a damaged rollout whose identity
//     cannot be read is refused (ErrDamaged); anything else diverges
//     (ErrDiverged). Every rollout of the chain is planned before any is
//     placed, so a refusal changes nothing.
//   - A placed entry names the source's chunks and index: no byte is
//     copied. Each lands atomically (Graft, checking under the target's
//     lock that what was planned against is still there) and is verified
//     afterwards. Ancestors land first, so a crash at any point leaves a
//     target on which Bind can simply run again.
//   - For Codex formats the derived state (Provider.Derived) is removed
//     from the target, and the target's handle for the provider is set to
//     the id and the turn the bound rollout is valid through.
func Bind(ctx context.Context, env Env, req BindRequest) (BindResult, error) {
	p, err := Lookup(req.Provider)
	if err != nil {
		return BindResult{}, fmt.Errorf("fork: bind: %w", err)
	}
	return BindProvider(ctx, env, p, req)
}

// BindProvider is Bind with the provider given rather than looked up.
func BindProvider(ctx context.Context, env Env, p Provider, req BindRequest) (BindResult, error) {
	res := BindResult{Provider: p.Name}
	id, err := checkID(req.ID)
	if err == nil {
		err = checkSessions(req.Source, req.Target)
	}
	if err != nil {
		return res, fmt.Errorf("fork: bind %s %q: %w", p.Name, req.ID, err)
	}
	fail := func(err error) (BindResult, error) {
		return res, fmt.Errorf("fork: bind %s %s from %s into %s: %w", p.Name, id, req.Source, req.Target, err)
	}
	srcRoot, err := env.Root(ctx, req.Source)
	if err != nil {
		return fail(err)
	}
	chain, err := sourceChain(ctx, env, srcRoot, AtHome(p, req.SourceHome), id)
	if err != nil {
		return fail(err)
	}
	p = AtHome(p, req.TargetHome)
	var plans []plan
	for attempt := 1; ; attempt++ {
		plans, err = apply(ctx, env, p, req.Target, chain)
		if err == nil {
			break
		}
		if !errors.Is(err, ErrConflict) || attempt == maxAttempts {
			return fail(err)
		}
	}
	for _, pl := range plans {
		res.Rollouts = append(res.Rollouts, Bound{
			ID: pl.src.Info.Identity.ID, SourcePath: pl.src.Path, Path: pl.path,
			Action: pl.action, Size: pl.src.Entry.Size,
		})
	}
	if res.Removed, err = dropDerived(ctx, env, req.Target, p); err != nil {
		return fail(err)
	}
	child := plans[len(plans)-1]
	res.Handle = manifest.Handle{ID: id, Through: child.src.Info.Through}
	if child.action == ActionKeep {
		last, err := lastRecord(ctx, env, child.cur)
		if err != nil {
			return fail(err)
		}
		if last != nil && p.Through != nil {
			res.Handle.Through = p.Through(last)
		}
	}
	if err := env.SetHandle(ctx, req.Target, p.Name, res.Handle); err != nil {
		return fail(fmt.Errorf("set handle: %w", err))
	}
	return res, nil
}

func checkSessions(source, target string) error {
	for _, s := range []string{source, target} {
		if err := manifest.ValidateSessionName(s); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	if source == target {
		return fmt.Errorf("%w: source and target are the same session %q", ErrInvalid, source)
	}
	return nil
}

// sourceChain finds the rollout of id in the source, checks it, and (for a
// provider that forks by reference) its ancestors: child first.
func sourceChain(ctx context.Context, g cas.Getter, root cas.Ref, p Provider, id string) ([]rollout, error) {
	var chain []rollout
	seen := map[string]bool{}
	for cur := id; ; {
		if len(chain) == maxChain {
			return nil, fmt.Errorf("%w: ancestor chain longer than %d", ErrDamaged, maxChain)
		}
		seen[cur] = true
		r, err := findOne(ctx, g, root, p, cur, "source")
		if err != nil {
			if len(chain) > 0 {
				err = fmt.Errorf("ancestor of %s: %w", chain[len(chain)-1].Info.Identity.ID, err)
			}
			return nil, err
		}
		info, err := ScanRollout(ctx, g, p, &r.Entry)
		if err != nil {
			return nil, fmt.Errorf("source %s: %w", r.Path, err)
		}
		if info.Damaged() {
			return nil, fmt.Errorf("source %s: line at byte %d is not a JSON object: %w", r.Path, info.FirstDamaged, ErrDamaged)
		}
		r.Info = info
		if len(chain) > 0 {
			if hb := chain[len(chain)-1].Info.Identity.HistoryBase; hb != nil && hb.EndByteOffset > r.Entry.Size {
				return nil, fmt.Errorf("source %s: %d bytes, its child %s reads %d: %w",
					r.Path, r.Entry.Size, chain[len(chain)-1].Info.Identity.ID, hb.EndByteOffset, ErrNotFound)
			}
		}
		chain = append(chain, r)
		if !p.Chain {
			return chain, nil
		}
		parent, err := info.Identity.Parent()
		if err != nil {
			return nil, fmt.Errorf("source %s: %w: %w", r.Path, ErrDamaged, err)
		}
		if parent == "" {
			return chain, nil
		}
		if seen[parent] {
			return nil, fmt.Errorf("source %s: forked from %s, a cycle: %w", r.Path, parent, ErrDamaged)
		}
		if parent, err = checkID(parent); err != nil {
			return nil, fmt.Errorf("source %s: forked_from_id: %w", r.Path, err)
		}
		cur = parent
	}
}

// findOne returns the one rollout of id in the tree root of side.
func findOne(ctx context.Context, g cas.Getter, root cas.Ref, p Provider, id, side string) (rollout, error) {
	l, err := locate(ctx, g, root, p, id)
	if err != nil {
		return rollout{}, err
	}
	switch len(l.matches) {
	case 1:
		return l.matches[0], nil
	case 0:
		var why []string
		if len(l.others) > 0 {
			why = append(why, "named for it but recording another session: "+strings.Join(l.others, ", "))
		}
		if len(l.unreadable) > 0 {
			why = append(why, "named for it but damaged at the first record: "+strings.Join(l.unreadable, ", "))
		}
		msg := fmt.Sprintf("no %s rollout of %s under %s/", side, id, p.Home)
		if p.Home == "" {
			msg = fmt.Sprintf("no %s rollout of %s in the session", side, id)
		}
		if len(why) > 0 {
			msg += " (" + strings.Join(why, "; ") + ")"
		}
		return rollout{}, fmt.Errorf("%s: %w", msg, ErrNotFound)
	default:
		paths := make([]string, len(l.matches))
		for i, m := range l.matches {
			paths[i] = m.Path
		}
		return rollout{}, fmt.Errorf("%s rollouts of %s: %s: %w", side, id, strings.Join(paths, ", "), ErrAmbiguous)
	}
}

// plan is what binding one rollout will do in the target.
type plan struct {
	src    rollout
	path   string          // in the target
	cur    *manifest.Entry // the target's entry at path when planned, nil if none
	action Action
}

// apply plans every rollout of the chain against the target's current
// root, then grafts ancestors first, then verifies. ErrConflict means the
// target moved meanwhile: plan again.
func apply(ctx context.Context, env Env, p Provider, target string, chain []rollout) ([]plan, error) {
	root, err := env.Root(ctx, target)
	if err != nil {
		return nil, err
	}
	plans := make([]plan, 0, len(chain))
	for i := len(chain) - 1; i >= 0; i-- {
		pl, err := planOne(ctx, env, root, p, chain[i])
		if err != nil {
			return nil, err
		}
		plans = append(plans, pl)
	}
	for _, pl := range plans {
		if pl.action != ActionAdd && pl.action != ActionReplace {
			continue
		}
		e := graftEntry(&pl.src.Entry, path.Base(pl.path))
		err := env.Graft(ctx, target, pl.path, &e, func(cur *manifest.Entry) error {
			if !sameState(cur, pl.cur) {
				return fmt.Errorf("%s changed since it was read: %w", pl.path, ErrConflict)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("place %s: %w", pl.path, err)
		}
	}
	// Verify: the source's bytes must now be a prefix of (usually equal to)
	// the target's.
	root, err = env.Root(ctx, target)
	if err != nil {
		return nil, err
	}
	for i := range plans {
		pl := &plans[i]
		e, err := lookup(ctx, env, root, pl.path)
		if err != nil {
			return nil, fmt.Errorf("verify %s: %w", pl.path, err)
		}
		ok := e != nil && e.Kind == manifest.KindFile
		if ok {
			if ok, err = isPrefix(ctx, env, &pl.src.Entry, e); err != nil {
				return nil, fmt.Errorf("verify %s: %w", pl.path, err)
			}
		}
		if !ok {
			return nil, fmt.Errorf("verify %s: the target does not hold the source's bytes: %w", pl.path, ErrConflict)
		}
		if pl.action == ActionKeep {
			pl.cur = e
		}
	}
	return plans, nil
}

// planOne reconciles the source rollout src with what the target root
// holds for its id.
func planOne(ctx context.Context, g cas.Getter, root cas.Ref, p Provider, src rollout) (plan, error) {
	id := src.Info.Identity.ID
	pl := plan{src: src}
	l, err := locate(ctx, g, root, p, id)
	if err != nil {
		return pl, err
	}
	if len(l.unreadable) > 0 {
		return pl, fmt.Errorf("target %s: damaged before its identity can be read: %w", strings.Join(l.unreadable, ", "), ErrDamaged)
	}
	switch len(l.matches) {
	case 0:
		pl.path, pl.action = joinPath(p.Home, src.Rel), ActionAdd
		cur, err := lookup(ctx, g, root, pl.path)
		if err != nil {
			return pl, err
		}
		if cur != nil {
			return pl, fmt.Errorf("target %s: holds a %v that is not a rollout of %s: %w", pl.path, cur.Kind, id, ErrDiverged)
		}
		return pl, nil
	case 1:
	default:
		var paths []string
		for _, m := range l.matches {
			paths = append(paths, m.Path)
		}
		return pl, fmt.Errorf("target rollouts of %s: %s: %w", id, strings.Join(paths, ", "), ErrAmbiguous)
	}
	t := l.matches[0]
	pl.path, pl.cur = t.Path, &t.Entry
	var ok bool
	switch {
	case t.Entry.Size >= src.Entry.Size:
		pl.action = ActionKeep
		if t.Entry.Size == src.Entry.Size {
			pl.action = ActionIdentical
		}
		ok, err = isPrefix(ctx, g, &src.Entry, &t.Entry)
	default:
		pl.action = ActionReplace
		ok, err = isPrefix(ctx, g, &t.Entry, &src.Entry)
	}
	if err != nil {
		return pl, fmt.Errorf("compare %s with %s: %w", src.Path, t.Path, err)
	}
	if !ok {
		return pl, fmt.Errorf("target %s (%d bytes) and source %s (%d bytes) differ within the first %d bytes: %w",
			t.Path, t.Entry.Size, src.Path, src.Entry.Size, min(t.Entry.Size, src.Entry.Size), ErrDiverged)
	}
	return pl, nil
}

// graftEntry is the entry placed in the target: the source's, sharing its
// chunks and index, but not its hard-link identity (which is per tree).
func graftEntry(src *manifest.Entry, name string) manifest.Entry {
	e := *src
	e.Name = name
	e.Chunks = append([]cas.Ref(nil), src.Chunks...)
	e.Xattrs = append([]manifest.Xattr(nil), src.Xattrs...)
	e.LinkID, e.Nlink = 0, 0
	return e
}

// sameState reports whether the entry now at a path is the one planned
// against (both absent, or the same file content).
func sameState(cur, planned *manifest.Entry) bool {
	if cur == nil || planned == nil {
		return cur == nil && planned == nil
	}
	return cur.Kind == manifest.KindFile && planned.Kind == manifest.KindFile && sameContent(cur, planned)
}

// dropDerived removes the provider's derived state from the target and
// returns the paths that were there.
func dropDerived(ctx context.Context, env Env, target string, p Provider) ([]string, error) {
	if len(p.Derived) == 0 {
		return nil, nil
	}
	root, err := env.Root(ctx, target)
	if err != nil {
		return nil, err
	}
	var removed []string
	for _, d := range p.Derived {
		fp := joinPath(p.Home, d)
		e, err := lookup(ctx, env, root, fp)
		if err != nil {
			return removed, err
		}
		if e == nil {
			continue
		}
		if err := env.Remove(ctx, target, fp); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return removed, fmt.Errorf("drop derived state %s: %w", fp, err)
		}
		removed = append(removed, fp)
	}
	return removed, nil
}

// BindHandles binds every provider session named by handles (a snapshot's
// or a head's) from source into target: "whatever is there". A provider
// the registry does not know has nothing to bind and is returned in
// skipped, not as an error. It stops at the first failing provider.
func BindHandles(ctx context.Context, env Env, source, target string, handles map[string]manifest.Handle) (results []BindResult, skipped []string, err error) {
	for _, name := range slices.Sorted(maps.Keys(handles)) {
		p, err := Lookup(name)
		if errors.Is(err, ErrUnknownProvider) {
			skipped = append(skipped, name)
			continue
		}
		res, err := BindProvider(ctx, env, p, BindRequest{Provider: name, ID: handles[name].ID, Source: source, Target: target})
		if err != nil {
			return results, skipped, err
		}
		results = append(results, res)
	}
	return results, skipped, nil
}
