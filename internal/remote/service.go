package remote

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/remote/objstore"
)

// Service is what a daemon keeps for its remotes: the registry in its root,
// one open client per remote, and the ReadThrough store its Engine reads
// through. The daemon's endpoints (remote add, push, pull, mount --remote,
// capture --push) are each one call here.
type Service struct {
	reg  *Registry
	rt   *ReadThrough
	opts Options

	mu   sync.Mutex
	open map[string]*Remote // GUARDED_BY(mu)
}

// NewService loads <root>/remotes.json. rt is the store the daemon's Engine
// and catalog are built over (nil if the daemon reads only locally: then
// pulls are complete only with All).
func NewService(root string, rt *ReadThrough, opts Options) (*Service, error) {
	reg, err := LoadRegistry(filepath.Join(root, RegistryFile))
	if err != nil {
		return nil, err
	}
	return &Service{reg: reg, rt: rt, opts: opts, open: make(map[string]*Remote)}, nil
}

// Registry returns the configured remotes.
func (s *Service) Registry() *Registry { return s.reg }

// Add configures a remote. It checks the config and that credentials can
// be found. A plain remote's server is not contacted; an encrypted
// remote's key is checked against the remote's key check object, which is
// made on an empty prefix (and a prefix with other objects refused). A
// remote that does not answer that one attempt is added all the same, as
// a plain one is, and checked at its first use.
func (s *Service) Add(ctx context.Context, cfg Config) error {
	opts := s.opts
	opts.MaxAttempts = 1
	r, err := Open(ctx, cfg, opts)
	if err != nil {
		return err
	}
	if err := r.keyReady(ctx); err != nil {
		if !errors.Is(err, objstore.ErrUnavailable) {
			return err
		}
		r.log.Warn("remote does not answer: its encryption key is checked at first use", "remote", cfg.Name, "err", err)
	}
	return s.reg.Add(cfg)
}

// Remove forgets the remote name: it leaves the registry, and reads stop
// asking it. Nothing on the remote is touched; chunks of snapshots pulled
// lazily from it that are not local become unreadable until it is added
// again.
func (s *Service) Remove(name string) error {
	if err := s.reg.Remove(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.open[name]; ok {
		delete(s.open, name)
		if s.rt != nil {
			s.rt.RemoveRemote(r)
		}
	}
	return nil
}

// Remote returns the open client of the remote name ("" for the only
// one), opening it on first use and adding it to the ReadThrough.
func (s *Service) Remote(ctx context.Context, name string) (*Remote, error) {
	cfg, err := s.reg.Get(name)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := s.open[cfg.Name]; ok && r.Config() == cfg {
		return r, nil
	}
	r, err := Open(ctx, cfg, s.opts)
	if err != nil {
		return nil, err
	}
	s.open[cfg.Name] = r
	if s.rt != nil {
		s.rt.AddRemote(r)
	}
	return r, nil
}

// OpenAll opens every configured remote, so that lazy reads of snapshots
// pulled before a restart find their chunks. One that fails to open (an
// encryption key that cannot be read) does not keep the others closed.
func (s *Service) OpenAll(ctx context.Context) error {
	var errs []error
	for _, c := range s.reg.List() {
		if _, err := s.Remote(ctx, c.Name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Ping checks that the remote name answers (Remote.Ping).
func (s *Service) Ping(ctx context.Context, name string) error {
	r, err := s.Remote(ctx, name)
	if err != nil {
		return err
	}
	return r.Ping(ctx)
}

// Push pushes spec (a session or snapshot, see catalog.Resolve) to the
// remote name.
func (s *Service) Push(ctx context.Context, local PushSource, cat *catalog.Catalog, spec, name string, opts PushOptions) (*PushResult, error) {
	r, err := s.Remote(ctx, name)
	if err != nil {
		return nil, err
	}
	return Push(ctx, local, cat, r, spec, opts)
}

// Pull pulls spec from the remote name and, when reads go through the
// ReadThrough, registers the snapshot's files for read-ahead. Run it under
// the Engine's Guard: it puts nodes before it names them.
func (s *Service) Pull(ctx context.Context, local PullTarget, cat *catalog.Catalog, spec, name string, opts PullOptions) (*PullResult, error) {
	r, err := s.Remote(ctx, name)
	if err != nil {
		return nil, err
	}
	if s.rt != nil {
		// The ReadThrough counts chunks of lazily pulled trees as present:
		// All must ask what is really local, or it fetches nothing after
		// a lazy pull of the same snapshot.
		opts.local = s.rt.Unwrap()
	}
	res, err := Pull(ctx, local, cat, r, spec, opts)
	if err != nil {
		return res, err
	}
	if s.rt != nil && !opts.All {
		if err := s.rt.Hint(ctx, res.Snapshot.Root); err != nil {
			return res, fmt.Errorf("pull %s: %w", spec, err)
		}
	}
	return res, nil
}

// Stats returns the counters of every open remote, by name.
func (s *Service) Stats() map[string]Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]Stats, len(s.open))
	for name, r := range s.open {
		out[name] = r.Stats()
	}
	return out
}
