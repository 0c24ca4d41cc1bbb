package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/atomicfile"
	"github.com/homefs/homefs/internal/remote"
)

// RootIDFile holds the stable id of a daemon's root, which names it as a
// lease holder.
const RootIDFile = "root-id"

// leaseKeeper holds the leases this daemon acquired and renews each every
// ttl/3 until it is released, lost or the daemon closes. Leases are not
// released at Close: a daemon that stops leaves them to expire.
type leaseKeeper struct {
	root string
	log  *slog.Logger
	ctx  context.Context // canceled by close
	stop context.CancelFunc
	wg   sync.WaitGroup

	// opMu serializes this daemon's writes of leases, so that a renewal
	// never races an acquire or release of the same lease and loses.
	// Lock order: opMu < mu.
	opMu sync.Mutex
	mu   sync.Mutex
	held map[leaseKey]*heldLease // GUARDED_BY(mu)
	runs map[leaseKey]int        // GUARDED_BY(mu); runs (run --lease) holding each
	id   string                  // GUARDED_BY(mu); "" until loaded
}

type leaseKey struct{ remote, session string }

type heldLease struct {
	lease  *remote.Lease // GUARDED_BY(leaseKeeper.mu)
	cancel context.CancelFunc
}

func newLeaseKeeper(root string, log *slog.Logger) *leaseKeeper {
	ctx, stop := context.WithCancel(context.Background())
	return &leaseKeeper{root: root, log: log, ctx: ctx, stop: stop, held: make(map[leaseKey]*heldLease), runs: make(map[leaseKey]int)}
}

// close stops every renewal and waits for them.
func (k *leaseKeeper) close() {
	k.stop()
	k.wg.Wait()
}

// holder is this daemon as a lease holder: the host name and the id in
// <root>/root-id, made on first use.
func (k *leaseKeeper) holder() (remote.Holder, error) {
	host, err := os.Hostname()
	if err != nil {
		return remote.Holder{}, fmt.Errorf("lease: host name: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.id == "" {
		p := filepath.Join(k.root, RootIDFile)
		b, err := os.ReadFile(p)
		switch {
		case err == nil:
			k.id = strings.TrimSpace(string(b))
		case errors.Is(err, fs.ErrNotExist):
			var r [8]byte
			if _, err := rand.Read(r[:]); err != nil {
				return remote.Holder{}, err
			}
			id := hex.EncodeToString(r[:])
			if err := atomicfile.Write(p, 0o644, func(w io.Writer) error {
				_, err := io.WriteString(w, id+"\n")
				return err
			}); err != nil {
				return remote.Holder{}, fmt.Errorf("lease: write %s: %w", p, err)
			}
			k.id = id
		default:
			return remote.Holder{}, fmt.Errorf("lease: read %s: %w", p, err)
		}
		if k.id == "" {
			return remote.Holder{}, fmt.Errorf("lease: %s is empty: remove it to make a new id", p)
		}
	}
	return remote.Holder{Host: host, ID: k.id}, nil
}

// keep records l as held and renews it every ttl/3.
func (k *leaseKeeper) keep(r *remote.Remote, l *remote.Lease) {
	key := leaseKey{r.Name(), l.Session}
	ctx, cancel := context.WithCancel(k.ctx)
	h := &heldLease{lease: l, cancel: cancel}
	k.mu.Lock()
	if old := k.held[key]; old != nil {
		old.cancel()
	}
	k.held[key] = h
	k.mu.Unlock()
	every := time.Duration(l.TTLNs) / 3
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if !k.renew(ctx, r, key, h) {
				return
			}
		}
	}()
}

// renew renews h once; false means it is dropped.
func (k *leaseKeeper) renew(ctx context.Context, r *remote.Remote, key leaseKey, h *heldLease) bool {
	k.opMu.Lock()
	defer k.opMu.Unlock()
	if ctx.Err() != nil {
		return false
	}
	k.mu.Lock()
	cur := h.lease
	k.mu.Unlock()
	n, err := r.Renew(ctx, cur)
	switch {
	case ctx.Err() != nil:
		return false
	case errors.Is(err, remote.ErrLeased):
		k.log.Error("lease lost: another host took it; this host no longer holds the session", "remote", key.remote, "session", key.session, "err", err)
		k.drop(key, h)
		return false
	case err != nil:
		// The next tick tries again, while the lease lasts.
		k.log.Warn("lease renewal failed", "remote", key.remote, "session", key.session, "expires", time.Unix(0, cur.ExpiresNs), "err", err)
		return true
	}
	k.mu.Lock()
	h.lease = n
	k.mu.Unlock()
	k.log.Debug("lease renewed", "remote", key.remote, "session", key.session, "expires", n.Expires())
	return true
}

// drop forgets h if it is still the lease held under key.
func (k *leaseKeeper) drop(key leaseKey, h *heldLease) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.held[key] == h {
		delete(k.held, key)
		h.cancel()
	}
}

func (k *leaseKeeper) kept(key leaseKey) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.held[key] != nil
}

func (s *Service) leaseInfo(r *remote.Remote, l *remote.Lease, holder remote.Holder) *api.LeaseInfo {
	return &api.LeaseInfo{
		Remote: r.Name(), Session: l.Session, Holder: l.Holder,
		Acquired: time.Unix(0, l.AcquiredNs).UTC(), Renewed: time.Unix(0, l.RenewedNs).UTC(), Expires: l.Expires().UTC(),
		TTLMs: time.Duration(l.TTLNs).Milliseconds(), Released: l.Released, Live: l.Live(time.Now()),
		Ours: l.Holder == holder, Kept: s.leases.kept(leaseKey{r.Name(), l.Session}),
	}
}

// AcquireLease takes the lease of a session on a remote for this daemon,
// which renews it until it is released or the daemon stops.
func (s *Service) AcquireLease(ctx context.Context, req api.LeaseRequest) (*api.LeaseInfo, error) {
	if req.TTLMs < 0 {
		return nil, usagef("lease ttl must be positive")
	}
	r, err := s.remotes.Remote(ctx, req.Remote)
	if err != nil {
		return nil, err
	}
	holder, err := s.leases.holder()
	if err != nil {
		return nil, err
	}
	s.leases.opMu.Lock()
	defer s.leases.opMu.Unlock()
	l, err := r.Acquire(ctx, req.Session, holder, remote.AcquireOptions{TTL: time.Duration(req.TTLMs) * time.Millisecond, Steal: req.Steal})
	if err != nil {
		return nil, err
	}
	s.leases.keep(r, l)
	s.log.Info("lease acquired", "remote", r.Name(), "session", req.Session, "expires", l.Expires(), "steal", req.Steal)
	return s.leaseInfo(r, l, holder), nil
}

// ReleaseLease gives back this daemon's lease of a session on a remote.
func (s *Service) ReleaseLease(ctx context.Context, req api.LeaseRequest) (*api.LeaseInfo, error) {
	r, err := s.remotes.Remote(ctx, req.Remote)
	if err != nil {
		return nil, err
	}
	holder, err := s.leases.holder()
	if err != nil {
		return nil, err
	}
	s.leases.opMu.Lock()
	defer s.leases.opMu.Unlock()
	key := leaseKey{r.Name(), req.Session}
	s.leases.mu.Lock()
	h := s.leases.held[key]
	s.leases.mu.Unlock()
	if h != nil {
		s.leases.drop(key, h)
	}
	l, err := r.Release(ctx, req.Session, holder)
	if err != nil {
		return nil, err
	}
	s.log.Info("lease released", "remote", r.Name(), "session", req.Session)
	return s.leaseInfo(r, l, holder), nil
}

// Lease reads the lease of a session on a remote.
func (s *Service) Lease(ctx context.Context, session, remoteName string) (*api.LeaseInfo, error) {
	r, err := s.remotes.Remote(ctx, remoteName)
	if err != nil {
		return nil, err
	}
	holder, err := s.leases.holder()
	if err != nil {
		return nil, err
	}
	l, err := r.Lease(ctx, session)
	if err != nil {
		return nil, err
	}
	return s.leaseInfo(r, l, holder), nil
}

func (s *Service) leaseRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+api.PathLeases, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		v, err := s.Lease(r.Context(), q.Get("session"), q.Get("remote"))
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathLeaseAcquire, func(w http.ResponseWriter, r *http.Request) {
		var req api.LeaseRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.AcquireLease(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathLeaseRelease, func(w http.ResponseWriter, r *http.Request) {
		var req api.LeaseRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.ReleaseLease(r.Context(), req)
		reply(w, v, err)
	})
}

// leaseForMount takes the lease of session on remoteName for a mount, and
// returns the remote's name and how to give the lease back if the mount
// fails: unless the daemon held it already.
func (s *Service) leaseForMount(ctx context.Context, session, remoteName string) (string, func(), error) {
	return s.leaseFor(ctx, "mount --lease", session, remoteName)
}

// leaseFor is leaseForMount for the command what.
func (s *Service) leaseFor(ctx context.Context, what, session, remoteName string) (string, func(), error) {
	r, err := s.remotes.Remote(ctx, remoteName)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", what, err)
	}
	before := s.leases.kept(leaseKey{r.Name(), session})
	if _, err := s.AcquireLease(ctx, api.LeaseRequest{Session: session, Remote: r.Name()}); err != nil {
		return "", nil, fmt.Errorf("%s: %w", what, err)
	}
	undo := func() {
		if before {
			return
		}
		if _, err := s.ReleaseLease(context.WithoutCancel(ctx), api.LeaseRequest{Session: session, Remote: r.Name()}); err != nil {
			s.log.Warn(what+" failed, and its lease could not be released: it expires", "remote", r.Name(), "session", session, "err", err)
		}
	}
	return r.Name(), undo, nil
}

// leaseForRun takes the lease of session on remoteName for a run (homefs
// run --lease) before its mount is held. undo gives it back if the run
// cannot start (unless the daemon held it already); end, when the run
// ends, once no other run or mount of this daemon holds it.
func (s *Service) leaseForRun(ctx context.Context, session, remoteName string) (undo, end func(), err error) {
	name, undoAcquire, err := s.leaseFor(ctx, "run --lease", session, remoteName)
	if err != nil {
		return nil, nil, err
	}
	key := leaseKey{name, session}
	s.leases.mu.Lock()
	s.leases.runs[key]++
	s.leases.mu.Unlock()
	undo = func() {
		if !s.leases.dropRun(key) {
			undoAcquire()
		}
	}
	end = func() {
		if s.leases.dropRun(key) || s.mountHoldsLease(key) {
			return
		}
		if _, err := s.ReleaseLease(context.Background(), api.LeaseRequest{Session: session, Remote: name}); err != nil {
			s.log.Warn("run ended, but its lease could not be released: it expires", "remote", name, "session", session, "err", err)
		}
	}
	return undo, end, nil
}

// dropRun counts one run less holding key's lease and reports whether
// other runs still hold it.
func (k *leaseKeeper) dropRun(key leaseKey) (others bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.runs[key]--
	if k.runs[key] > 0 {
		return true
	}
	delete(k.runs, key)
	return false
}

// runHolds reports whether a run holds key's lease.
func (k *leaseKeeper) runHolds(key leaseKey) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.runs[key] > 0
}

// mountHoldsLease reports whether a mount of this daemon holds key's
// lease.
func (s *Service) mountHoldsLease(key leaseKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.mounts {
		if m.Lease == key.remote && m.Session == key.session {
			return true
		}
	}
	return false
}

// releaseMountLease gives back the lease an unmounted mount took, once no
// other mount or run of this daemon holds it.
func (s *Service) releaseMountLease(ctx context.Context, info api.MountInfo) {
	if info.Lease == "" {
		return
	}
	key := leaseKey{info.Lease, info.Session}
	if s.mountHoldsLease(key) || s.leases.runHolds(key) {
		return
	}
	if _, err := s.ReleaseLease(context.WithoutCancel(ctx), api.LeaseRequest{Session: info.Session, Remote: info.Lease}); err != nil {
		s.log.Warn("unmounted, but its lease could not be released: it expires", "remote", info.Lease, "session", info.Session, "err", err)
	}
}
