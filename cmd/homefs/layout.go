package main

import (
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/manifest"
)

// layoutFlags say where a session's parts belong (manifest.Layout).
func layoutFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "home", Usage: "PROVIDER=SUBTREE: the subtree that is PROVIDER's home (else found by content)"},
		&cli.StringSliceFlag{Name: "home-at", Usage: "PROVIDER=PATH: the canonical path of PROVIDER's home (homefs run shows it there)"},
		&cli.StringFlag{Name: "workspace", Usage: "SUBTREE that is the workspace (default: workspace)"},
		&cli.StringFlag{Name: "workspace-at", Usage: "canonical path of the workspace (homefs run shows it there and starts in it)"},
	}
}

func ownerFlag(usage string) cli.Flag {
	return &cli.StringFlag{Name: "owner", Usage: usage + " (UID:GID, USER or USER:GROUP)"}
}

// layoutChanged reports whether c sets any layout flag.
func layoutChanged(c *cli.Context) bool {
	for _, f := range []string{"home", "home-at", "workspace", "workspace-at"} {
		if c.IsSet(f) {
			return true
		}
	}
	return false
}

// applyLayoutFlags returns base (nil for none) changed by c's layout flags.
func applyLayoutFlags(c *cli.Context, base *manifest.Layout) (*manifest.Layout, error) {
	l := base.Clone()
	if l == nil {
		l = &manifest.Layout{}
	}
	created := make(map[string]bool)
	home := func(provider string) *manifest.Place {
		for i := range l.Homes {
			if l.Homes[i].Provider == provider {
				return &l.Homes[i]
			}
		}
		created[provider] = true
		l.Homes = append(l.Homes, manifest.Place{Provider: provider})
		return &l.Homes[len(l.Homes)-1]
	}
	for _, kv := range c.StringSlice("home") {
		p, sub, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usageError{fmt.Errorf("--home %q: want PROVIDER=SUBTREE", kv)}
		}
		home(p).Subtree = strings.Trim(sub, "/")
	}
	for _, kv := range c.StringSlice("home-at") {
		p, at, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, usageError{fmt.Errorf("--home-at %q: want PROVIDER=PATH", kv)}
		}
		h := home(p)
		h.At = filepath.Clean(at)
		if created[p] && !hasHomeFlag(c, p) {
			// A new home without a subtree: the provider's usual one.
			if prov, err := fork.Lookup(p); err == nil {
				h.Subtree = prov.Home
			}
		}
	}
	if c.IsSet("workspace") || c.IsSet("workspace-at") {
		w := l.Workspace
		if w == nil {
			w = &manifest.Place{Subtree: "workspace"}
			l.Workspace = w
		}
		if c.IsSet("workspace") {
			w.Subtree = strings.Trim(c.String("workspace"), "/")
		}
		if c.IsSet("workspace-at") {
			w.At = filepath.Clean(c.String("workspace-at"))
		}
	}
	l.Normalize()
	if err := l.Validate(); err != nil {
		return nil, usageError{err}
	}
	if l.IsEmpty() {
		return nil, nil
	}
	return l, nil
}

// hasHomeFlag reports whether --home names provider.
func hasHomeFlag(c *cli.Context, provider string) bool {
	for _, kv := range c.StringSlice("home") {
		if p, _, _ := strings.Cut(kv, "="); p == provider {
			return true
		}
	}
	return false
}

// parseOwner reads UID:GID, USER (its primary group) or USER:GROUP.
func parseOwner(s string) (*api.Owner, error) {
	if s == "" {
		return nil, nil
	}
	u, g, hasGroup := strings.Cut(s, ":")
	uid, err := strconv.ParseUint(u, 10, 32)
	gid := uint64(0)
	if err != nil {
		usr, err := lookupUser(u)
		if err != nil {
			return nil, usageError{fmt.Errorf("owner %q: %w", s, err)}
		}
		uid, _ = strconv.ParseUint(usr.Uid, 10, 32)
		gid, _ = strconv.ParseUint(usr.Gid, 10, 32)
	} else if !hasGroup {
		return nil, usageError{fmt.Errorf("owner %q: want UID:GID, USER or USER:GROUP", s)}
	}
	if hasGroup {
		if gid, err = strconv.ParseUint(g, 10, 32); err != nil {
			grp, err := lookupGroup(g)
			if err != nil {
				return nil, usageError{fmt.Errorf("owner %q: %w", s, err)}
			}
			gid, _ = strconv.ParseUint(grp.Gid, 10, 32)
		}
	}
	return &api.Owner{UID: uint32(uid), GID: uint32(gid)}, nil
}

// printDerived reports what a fork-like operation did with the providers'
// path-bearing state: what it dropped on out, warnings on errOut.
func printDerived(out, errOut io.Writer, s *api.SessionInfo) {
	for _, p := range s.DroppedDerived {
		fmt.Fprintf(out, "dropped derived state %s (the harness rebuilds it)\n", p)
	}
	for _, w := range s.Warnings {
		fmt.Fprintf(errOut, "homefs: warning: %s\n", w)
	}
}

// layoutString is a layout in one line, for tables.
func layoutString(l *manifest.Layout) string {
	if l.IsEmpty() {
		return "-"
	}
	var parts []string
	for _, p := range l.Places() {
		name := p.Provider
		if name == "" {
			name = "workspace"
		}
		sub := p.Subtree
		if sub == "" {
			sub = "."
		}
		s := name + "=" + sub
		if p.At != "" {
			s += "@" + p.At
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}
