package fork

import (
	"context"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Sessions is what binding needs of the sessions it works on. fusefs.Engine
// implements it; forktest.MemEnv does in memory.
type Sessions interface {
	// Root returns the session's current root, flushed (a live session is
	// synced first), so that what binding reads is what a capture would
	// see.
	Root(ctx context.Context, session string) (cas.Ref, error)
	// Graft places e at path atomically, creating missing parent
	// directories. Under the session's lock it first calls check with the
	// entry currently at path (nil if none); an error from check vetoes
	// the graft and is returned unchanged (wrapped).
	Graft(ctx context.Context, session, path string, e *manifest.Entry, check func(cur *manifest.Entry) error) error
	// Remove deletes the entry at path (a file, or a directory with its
	// content). Removing an absent path is not an error.
	Remove(ctx context.Context, session, path string) error
	// SetHandle records h as the session's handle for provider, so the next
	// capture records it.
	SetHandle(ctx context.Context, session, provider string, h manifest.Handle) error
}

// Env is Sessions plus read access to the store they live in.
type Env interface {
	Sessions
	cas.Getter
}

type env struct {
	Sessions
	cas.Getter
}

// WithStore makes an Env of sessions whose trees and chunks g reads.
func WithStore(s Sessions, g cas.Getter) Env { return env{s, g} }
