package manifest

import (
	"path"
	"slices"
	"strings"
	"unicode/utf8"
)

// Limits on layouts.
const (
	// MaxHomes bounds Layout.Homes.
	MaxHomes = 16
	// MaxCanonicalPathLen bounds Place.At.
	MaxCanonicalPathLen = 4096
)

// Layout says what the parts of a session are and where they belong on a
// host: which subtree is which provider's home, which is the workspace,
// and the canonical path (an absolute path) at which `homefs run` shows
// each part. Providers store absolute paths (Codex's state database,
// Claude Code's project folders, Pi's session headers); a session shown
// at its canonical paths keeps them valid in every fork, restore and move.
// A layout travels with the session: heads, snapshot records, forks,
// pushes and pulls carry it.
type Layout struct {
	// Homes are provider homes, sorted by Subtree.
	Homes []Place `json:"homes,omitempty"`
	// Workspace is the repository the agent edits, if the session has one.
	Workspace *Place `json:"workspace,omitempty"`
}

// Place is one part of a session.
type Place struct {
	// Subtree is the part's path inside the session ("" for the root).
	Subtree string `json:"subtree"`
	// At is the canonical absolute path, "" when none was given.
	At string `json:"at,omitempty"`
	// Provider names the harness whose home this is (a home's only).
	Provider string `json:"provider,omitempty"`
}

// Places returns every place of l: the homes, then the workspace.
func (l *Layout) Places() []Place {
	if l == nil {
		return nil
	}
	out := slices.Clone(l.Homes)
	if l.Workspace != nil {
		out = append(out, *l.Workspace)
	}
	return out
}

// Home returns the home of provider, if l records one.
func (l *Layout) Home(provider string) (Place, bool) {
	if l != nil {
		for _, h := range l.Homes {
			if h.Provider == provider {
				return h, true
			}
		}
	}
	return Place{}, false
}

// IsEmpty reports whether l records nothing.
func (l *Layout) IsEmpty() bool { return l == nil || len(l.Homes) == 0 && l.Workspace == nil }

// Clone returns a deep copy of l (nil for nil).
func (l *Layout) Clone() *Layout {
	if l == nil {
		return nil
	}
	c := &Layout{Homes: slices.Clone(l.Homes)}
	if l.Workspace != nil {
		w := *l.Workspace
		c.Workspace = &w
	}
	return c
}

// Normalize sorts the homes, the form Validate requires.
func (l *Layout) Normalize() {
	if l == nil {
		return
	}
	slices.SortFunc(l.Homes, func(a, b Place) int { return strings.Compare(a.Subtree, b.Subtree) })
}

// Validate checks the rules of a layout: subtrees are valid paths (or the
// root), none inside another; canonical paths are clean absolute paths
// other than "/", none the same as another; every home names a provider
// (a lower-case word), at most once, the workspace none; homes are
// sorted.
func (l *Layout) Validate() error {
	if l == nil {
		return nil
	}
	if len(l.Homes) > MaxHomes {
		return errf(ErrTooLarge, "layout: %d homes, over %d", len(l.Homes), MaxHomes)
	}
	if !slices.IsSortedFunc(l.Homes, func(a, b Place) int { return strings.Compare(a.Subtree, b.Subtree) }) {
		return errf(ErrInvalid, "layout: homes not sorted by subtree")
	}
	providers := make(map[string]bool)
	for _, h := range l.Homes {
		if err := ValidateProviderName(h.Provider); err != nil {
			return wrapf(err, "layout: home %q", h.Subtree)
		}
		if providers[h.Provider] {
			return errf(ErrInvalid, "layout: two homes of provider %q", h.Provider)
		}
		providers[h.Provider] = true
	}
	if w := l.Workspace; w != nil && w.Provider != "" {
		return errf(ErrInvalid, "layout: the workspace names provider %q", w.Provider)
	}
	places := l.Places()
	for i, p := range places {
		if p.Subtree != "" {
			if err := ValidatePath(p.Subtree); err != nil {
				return wrapf(err, "layout: subtree")
			}
		}
		if p.At != "" {
			if err := validateCanonical(p.At); err != nil {
				return wrapf(err, "layout: canonical path of %q", p.Subtree)
			}
		}
		for _, q := range places[:i] {
			if subtreesOverlap(p.Subtree, q.Subtree) {
				return errf(ErrInvalid, "layout: subtrees %q and %q overlap", q.Subtree, p.Subtree)
			}
			if p.At != "" && p.At == q.At {
				return errf(ErrInvalid, "layout: %q and %q both at %s", q.Subtree, p.Subtree, p.At)
			}
		}
	}
	return nil
}

// ValidateProviderName checks a provider's name: 1 to 64 of a-z, 0-9 and
// '-', starting with a letter.
func ValidateProviderName(name string) error {
	if name == "" || len(name) > 64 {
		return errf(ErrInvalid, "provider name %.80q: want 1 to 64 characters", name)
	}
	for i, c := range name {
		if !('a' <= c && c <= 'z' || i > 0 && ('0' <= c && c <= '9' || c == '-')) {
			return errf(ErrInvalid, "provider name %.80q: want a-z, 0-9 and '-', starting with a letter", name)
		}
	}
	return nil
}

func validateCanonical(p string) error {
	switch {
	case len(p) > MaxCanonicalPathLen:
		return errf(ErrTooLarge, "%d bytes, over %d", len(p), MaxCanonicalPathLen)
	case !utf8.ValidString(p):
		return errf(ErrInvalid, "%.80q: not valid UTF-8", p)
	case !strings.HasPrefix(p, "/") || p == "/":
		return errf(ErrInvalid, "%.80q: want an absolute path other than /", p)
	case path.Clean(p) != p:
		return errf(ErrInvalid, "%.80q: not clean (want %s)", p, path.Clean(p))
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return errf(ErrInvalid, "%.80q: holds a control character", p)
	}
	for _, sys := range systemPaths {
		if p == sys || strings.HasPrefix(p, sys+"/") {
			return errf(ErrInvalid, "%.80q: inside %s, which a session must not cover (homefs run would show the session there, and a layout may come from another host)", p, sys)
		}
	}
	return nil
}

// systemPaths hold the system's own files and the kernel's: a canonical
// path there would let a session (written by an agent, perhaps pulled from
// another host) replace them in a run.
var systemPaths = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run/homefs", "/sbin", "/sys", "/usr"}

// subtreesOverlap reports whether one session subtree contains the other.
func subtreesOverlap(a, b string) bool {
	return a == "" || b == "" || a == b || strings.HasPrefix(a, b+"/") || strings.HasPrefix(b, a+"/")
}
