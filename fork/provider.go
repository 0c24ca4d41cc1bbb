package fork

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
)

// Identity is what a rollout's first record(s) say about the provider
// session it records.
type Identity struct {
	// ID is the provider session id.
	ID string
	// ForkedFrom is the id of the provider session this one was forked
	// from by reference (Codex forked_from_id), "" if none.
	ForkedFrom string
	// HistoryBase is how much of the parent's rollout the child reads when
	// it resumes (Codex history_base), nil if none.
	HistoryBase *HistoryBase
}

// HistoryBase locates the end of the inherited history in the parent's
// rollout.
type HistoryBase struct {
	ThreadID            string `json:"thread_id"`
	EndOrdinalExclusive int64  `json:"end_ordinal_exclusive"`
	EndByteOffset       int64  `json:"end_byte_offset"`
}

// Parent returns the provider session id this one inherits history from,
// "" if none. forked_from_id and history_base.thread_id must agree when
// both are set.
func (id Identity) Parent() (string, error) {
	p := id.ForkedFrom
	if hb := id.HistoryBase; hb != nil && hb.ThreadID != "" {
		if p != "" && p != hb.ThreadID {
			return "", fmt.Errorf("forked_from_id %q but history_base.thread_id %q", p, hb.ThreadID)
		}
		p = hb.ThreadID
	}
	return p, nil
}

// Provider describes how one agent harness keeps its sessions inside a
// homefs session. Each provider is registered from its own file.
type Provider struct {
	// Name is the registry key (and the key of the snapshot handle).
	Name string
	// Home is the provider's home directory, relative to the session root.
	Home string
	// Patterns locate the rollout of a provider session below Home:
	// slash-separated, "{id}" stands for the id, "*" matches within one
	// name (as path.Match), and a "**" segment matches any number of
	// directories. Only regular files match; symlinks are ignored.
	Patterns []string
	// IdentityWindow is how many leading records Identify is offered
	// before the identity counts as missing (1: the first record only).
	IdentityWindow int
	// Identify reads the identity from one record (one JSON line). ok is
	// false when the record does not carry one; an error means it claims
	// to but is malformed.
	Identify func(record []byte) (id Identity, ok bool, err error)
	// Through names the turn a rollout is valid through, from its last
	// record ("" when it cannot tell).
	Through func(last []byte) string
	// Chain says that Identity.Parent must be bound along (Codex forks by
	// reference).
	Chain bool
	// Derived lists files below Home that cache state recording absolute
	// paths or byte offsets; binding removes them from the target so the
	// harness rebuilds them (see docs/PROVIDERS.md).
	Derived []string
	// Detect reports whether a directory is this provider's home, by what
	// the provider keeps there (see Homes).
	Detect func(d Dir) (bool, error)
	// KeysOn, when set, says what absolute path the provider keys its
	// sessions on ("absolute workspace path"): a session shown elsewhere
	// cannot resume them (homefs run shows it at its canonical paths).
	KeysOn string
}

var registry struct {
	mu sync.RWMutex
	m  map[string]Provider // GUARDED_BY(mu)
}

// register adds p; each provider file calls it from init.
func register(p Provider) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if registry.m == nil {
		registry.m = make(map[string]Provider)
	}
	if _, dup := registry.m[p.Name]; dup {
		panic("fork: provider registered twice: " + p.Name)
	}
	if p.IdentityWindow < 1 {
		p.IdentityWindow = 1
	}
	registry.m[p.Name] = p
}

// Lookup returns the provider registered as name, or an error wrapping
// ErrUnknownProvider.
func Lookup(name string) (Provider, error) {
	registry.mu.RLock()
	p, ok := registry.m[name]
	registry.mu.RUnlock()
	if !ok {
		return Provider{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownProvider, name, strings.Join(Providers(), ", "))
	}
	return p, nil
}

// Providers returns the registered provider names, sorted.
func Providers() []string {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	return slices.Sorted(maps.Keys(registry.m))
}

// checkID trims a provider session id and refuses one that cannot name a
// file: empty, or holding '/' or a control character.
func checkID(id string) (string, error) {
	id = strings.TrimSpace(id)
	if id == "" {
		return "", fmt.Errorf("%w: empty provider session id", ErrInvalid)
	}
	if len(id) > 1024 {
		return "", fmt.Errorf("%w: provider session id of %d bytes", ErrInvalid, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c == '/' || c < 0x20 || c == 0x7f {
			return "", fmt.Errorf("%w: provider session id %q: byte %q at %d", ErrInvalid, id, c, i)
		}
	}
	return id, nil
}
