// Package forktest holds test helpers for package fork: an in-memory
// implementation of fork.Env over a cas.Store, and a loader of directory
// fixtures into the store. They live in ordinary files so that every
// package's tests can use them.
package forktest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/manifest"
)

// MemEnv is a fork.Env whose sessions are just roots in a map. Grafts and
// removals rewrite the path to the root, as the engine's flush would.
type MemEnv struct {
	Store cas.Store

	// BeforeGraft, when set, runs before each Graft takes the lock; an
	// error from it is returned as the graft's (a crash, say). Tests use it
	// to change a session under Bind.
	BeforeGraft func(session, path string) error

	mu      sync.Mutex
	roots   map[string]cas.Ref                    // GUARDED_BY(mu)
	handles map[string]map[string]manifest.Handle // GUARDED_BY(mu)
}

var _ fork.Env = (*MemEnv)(nil)

// NewMemEnv returns an Env with no sessions over store.
func NewMemEnv(store cas.Store) *MemEnv {
	return &MemEnv{Store: store, roots: map[string]cas.Ref{}, handles: map[string]map[string]manifest.Handle{}}
}

// Get implements cas.Getter.
func (m *MemEnv) Get(ctx context.Context, ref cas.Ref) ([]byte, error) { return m.Store.Get(ctx, ref) }

// SetRoot creates or resets session with root.
func (m *MemEnv) SetRoot(session string, root cas.Ref) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.roots[session] = root
}

// Handles returns a copy of the session's handles.
func (m *MemEnv) Handles(session string) map[string]manifest.Handle {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.handles[session])
}

// Root implements fork.Sessions.
func (m *MemEnv) Root(ctx context.Context, session string) (cas.Ref, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.roots[session]
	if !ok {
		return cas.Ref{}, fmt.Errorf("forktest: no session %q", session)
	}
	return r, nil
}

// Graft implements fork.Sessions.
func (m *MemEnv) Graft(ctx context.Context, session, path string, e *manifest.Entry, check func(cur *manifest.Entry) error) error {
	if m.BeforeGraft != nil {
		if err := m.BeforeGraft(session, path); err != nil {
			return err
		}
	}
	return m.edit(ctx, session, path, true, func(cur *manifest.Entry) (*manifest.Entry, error) {
		if check != nil {
			if err := check(cur); err != nil {
				return nil, err
			}
		}
		ne := *e
		return &ne, nil
	})
}

// Remove implements fork.Sessions.
func (m *MemEnv) Remove(ctx context.Context, session, path string) error {
	return m.edit(ctx, session, path, false, func(*manifest.Entry) (*manifest.Entry, error) { return nil, nil })
}

// SetHandle implements fork.Sessions.
func (m *MemEnv) SetHandle(ctx context.Context, session, provider string, h manifest.Handle) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.roots[session]; !ok {
		return fmt.Errorf("forktest: no session %q", session)
	}
	if m.handles[session] == nil {
		m.handles[session] = map[string]manifest.Handle{}
	}
	m.handles[session][provider] = h
	return nil
}

func (m *MemEnv) edit(ctx context.Context, session, path string, mkdirs bool, fn func(*manifest.Entry) (*manifest.Entry, error)) error {
	if err := manifest.ValidatePath(path); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	root, ok := m.roots[session]
	if !ok {
		return fmt.Errorf("forktest: no session %q", session)
	}
	nr, err := EditTree(ctx, m.Store, root, path, mkdirs, fn)
	if err != nil {
		return fmt.Errorf("forktest: %s: %s: %w", session, path, err)
	}
	m.roots[session] = nr
	return nil
}

// EditTree replaces the entry at path below root by what fn returns for
// the current one (nil: absent; returning nil removes it) and stores the
// directories up to the new root. With mkdirs, missing directories on the
// way are created (mode 0755); without, a missing one leaves root as is.
func EditTree(ctx context.Context, st cas.Store, root cas.Ref, path string, mkdirs bool, fn func(*manifest.Entry) (*manifest.Entry, error)) (cas.Ref, error) {
	return editTree(ctx, st, root, strings.Split(path, "/"), mkdirs, fn)
}

func editTree(ctx context.Context, st cas.Store, ref cas.Ref, segs []string, mkdirs bool, fn func(*manifest.Entry) (*manifest.Entry, error)) (cas.Ref, error) {
	t, err := manifest.GetTree(ctx, st, ref)
	if err != nil {
		return cas.Ref{}, err
	}
	name := segs[0]
	j, found := slices.BinarySearchFunc(t.Entries, name, func(e manifest.Entry, n string) int { return strings.Compare(e.Name, n) })
	if len(segs) == 1 {
		var cur *manifest.Entry
		if found {
			c := t.Entries[j]
			cur = &c
		}
		ne, err := fn(cur)
		if err != nil {
			return cas.Ref{}, err
		}
		switch {
		case ne == nil && !found:
			return ref, nil
		case ne == nil:
			t.Entries = slices.Delete(t.Entries, j, j+1)
		case found:
			ne.Name = name
			t.Entries[j] = *ne
		default:
			ne.Name = name
			t.Entries = slices.Insert(t.Entries, j, *ne)
		}
		return manifest.PutTree(ctx, st, t)
	}
	var sub cas.Ref
	switch {
	case found && t.Entries[j].Kind != manifest.KindDir:
		return cas.Ref{}, fmt.Errorf("%s: %w", name, syscall.ENOTDIR)
	case found:
		sub = t.Entries[j].Tree
	case !mkdirs:
		return ref, nil
	default:
		if sub, err = manifest.PutTree(ctx, st, &manifest.Tree{}); err != nil {
			return cas.Ref{}, err
		}
		t.Entries = slices.Insert(t.Entries, j, manifest.Entry{Name: name, Kind: manifest.KindDir, Mode: manifest.DefaultDirMode, Tree: sub})
	}
	nsub, err := editTree(ctx, st, sub, segs[1:], mkdirs, fn)
	if err != nil {
		return cas.Ref{}, err
	}
	if found && nsub == sub {
		return ref, nil
	}
	t.Entries[j].Tree = nsub
	return manifest.PutTree(ctx, st, t)
}
