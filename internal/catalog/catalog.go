package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

var (
	// ErrExists: a session of that name already exists.
	ErrExists = errors.New("catalog: session exists")
	// ErrNoSession: no session of that name.
	ErrNoSession = errors.New("catalog: no such session")
	// ErrNoSnapshot: no snapshot matches the id, prefix or spec.
	ErrNoSnapshot = errors.New("catalog: no such snapshot")
	// ErrBadPrefix: a snapshot id or prefix that cannot name one (too
	// short, too long, not hex). It comes wrapped with ErrNoSnapshot.
	ErrBadPrefix = errors.New("catalog: malformed snapshot id")
	// ErrAmbiguous: a snapshot prefix matches more than one snapshot.
	ErrAmbiguous = errors.New("catalog: ambiguous snapshot prefix")
	// ErrSameSession: a fork onto the session the snapshot came from.
	ErrSameSession = errors.New("catalog: fork target is the snapshot's own session")
	// ErrConflict: the head changed since it was read (or Gen is stale).
	// It wraps cas.ErrConflict.
	ErrConflict = fmt.Errorf("catalog: head changed concurrently: %w", cas.ErrConflict)
)

const (
	sessionPrefix  = "session/"
	snapshotPrefix = "snapshot/"

	// MinPrefixLen is the shortest snapshot id prefix Snapshot accepts.
	MinPrefixLen = 8
	// idLen is the length of a full snapshot id (hex of a cas.Ref).
	idLen = 2 * len(cas.Ref{})
)

// Catalog reads and changes the sessions and snapshots kept in a store. It
// holds no state of its own besides the store and clock, so any number of
// Catalogs (and processes, if the store allows) may share one store; the
// store's conditional commits keep them consistent.
type Catalog struct {
	store cas.Store
	now   func() time.Time
}

// Option configures a Catalog.
type Option func(*Catalog)

// WithClock sets the clock used for CreatedNs and UpdatedNs (tests pass a
// fixed one).
func WithClock(now func() time.Time) Option {
	return func(c *Catalog) { c.now = now }
}

// New returns a Catalog over store.
func New(store cas.Store, opts ...Option) *Catalog {
	c := &Catalog{store: store, now: time.Now}
	for _, o := range opts {
		o(c)
	}
	return c
}

func (c *Catalog) nowNs() int64 { return c.now().UnixNano() }

func sessionName(name string) string { return sessionPrefix + name }

func snapshotName(id string) string { return snapshotPrefix + id }

// commit runs one Names.Commit; when durable, it first syncs the store so
// that the chunks the new names refer to are durable before the names are.
func (c *Catalog) commit(ctx context.Context, ops []cas.NameOp, durable bool) error {
	if durable {
		if err := c.store.Sync(ctx); err != nil {
			return err
		}
	}
	err := c.store.Commit(ctx, ops, durable)
	if errors.Is(err, cas.ErrConflict) {
		return fmt.Errorf("%w (%v)", ErrConflict, err)
	}
	return err
}

// validSession wraps manifest.ValidateSessionName with catalog context.
func validSession(name string) error {
	if err := manifest.ValidateSessionName(name); err != nil {
		return fmt.Errorf("catalog: session %q: %w", name, err)
	}
	return nil
}
