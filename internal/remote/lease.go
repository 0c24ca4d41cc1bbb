package remote

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// A lease is one object per session, <prefix>leases/<session>, that says
// which host works on the session until when. Every write of it is a
// conditional put on the ETag read (or If-None-Match for the first), and
// is read back, as heads are (SetHead): two hosts racing for it cannot
// both see themselves as its holder. Expiry is judged by the clock of the
// host that reads the lease; see docs/ARCHITECTURE-remote.md.

const (
	leasesDir    = "leases/"
	leaseVersion = 1
)

func (r *Remote) leaseKey(session string) string {
	return r.prefix + leasesDir + r.objectName(leasesDir, session)
}

// Lease is a session's lease object.
type Lease struct {
	Version    int    `json:"version"`
	Session    string `json:"session"`
	Holder     Holder `json:"holder"`
	Token      string `json:"token"` // random per acquisition
	AcquiredNs int64  `json:"acquired_ns"`
	RenewedNs  int64  `json:"renewed_ns"`
	ExpiresNs  int64  `json:"expires_ns"`
	TTLNs      int64  `json:"ttl_ns"`
	Released   bool   `json:"released,omitempty"`
	// ETag is the object's version as read or written.
	ETag string `json:"-"`
}

// Expires is the lease's expiry.
func (l *Lease) Expires() time.Time { return time.Unix(0, l.ExpiresNs) }

// Live reports whether the lease binds other hosts at now: not released
// and not expired.
func (l *Lease) Live(now time.Time) bool { return !l.Released && now.UnixNano() < l.ExpiresNs }

// leasedError is ErrLeased naming cur's holder.
func (r *Remote) leasedError(cur *Lease) error {
	return fmt.Errorf("remote %s: session %s is leased to %s until %s: %w",
		r.cfg.Name, cur.Session, cur.Holder, cur.Expires().UTC().Format(time.RFC3339), ErrLeased)
}

// Lease reads the lease of session; an absent one wraps ErrNoLease.
func (r *Remote) Lease(ctx context.Context, session string) (*Lease, error) {
	if err := manifest.ValidateSessionName(session); err != nil {
		return nil, fmt.Errorf("remote %s: lease %q: %w", r.cfg.Name, session, err)
	}
	b, etag, err := r.getVersioned(ctx, r.leaseKey(session))
	if errors.Is(err, cas.ErrNotFound) {
		return nil, fmt.Errorf("remote %s: session %s: %w", r.cfg.Name, session, ErrNoLease)
	}
	if err != nil {
		return nil, err
	}
	var l Lease
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil || l.Version != leaseVersion || l.Session != session || l.Token == "" {
		return nil, fmt.Errorf("remote %s: lease of %s: %w: undecodable or foreign lease", r.cfg.Name, session, cas.ErrCorrupt)
	}
	l.ETag = etag
	return &l, nil
}

// AcquireOptions tune Acquire.
type AcquireOptions struct {
	TTL time.Duration // 0 means DefaultLeaseTTL
	// Steal takes the lease even from a live holder (a dead host's).
	Steal bool
}

// stealTries bounds the attempts of a steal that keeps losing to its
// victim's renewals.
const stealTries = 5

// beforeLeaseWrite, when set (tests), runs in acquireOnce between the
// read of the current lease and the conditional write of the new one.
var beforeLeaseWrite func()

// Acquire takes the lease of session for holder. A lease that is absent,
// released, expired or already holder's is taken; one live with another
// holder is refused with ErrLeased, unless opts.Steal. Losing a race to
// another host is ErrLeased naming the winner. A steal that loses to its
// victim's renewal (the same acquisition, by its token, written between
// the steal's read and its write) tries again: the holder renews every
// third of its ttl, and a steal must not fail for that.
func (r *Remote) Acquire(ctx context.Context, session string, holder Holder, opts AcquireOptions) (*Lease, error) {
	ttl := opts.TTL
	if ttl == 0 {
		ttl = DefaultLeaseTTL
	}
	if ttl < MinLeaseTTL {
		return nil, fmt.Errorf("remote %s: lease ttl %s is under %s: %w", r.cfg.Name, ttl, MinLeaseTTL, manifest.ErrInvalid)
	}
	for try := 1; ; try++ {
		l, cur, err := r.acquireOnce(ctx, session, holder, opts.Steal, ttl)
		if err == nil || !opts.Steal || cur == nil || try == stealTries || !errors.Is(err, ErrLeased) {
			return l, err
		}
		now, lerr := r.Lease(ctx, session)
		if lerr != nil || now.Token != cur.Token || now.Holder != cur.Holder || now.Released {
			return nil, err
		}
	}
}

// acquireOnce is Acquire, tried once; it also returns the lease it read
// (nil for none).
func (r *Remote) acquireOnce(ctx context.Context, session string, holder Holder, steal bool, ttl time.Duration) (*Lease, *Lease, error) {
	cur, err := r.Lease(ctx, session)
	if err != nil && !errors.Is(err, ErrNoLease) {
		return nil, nil, err
	}
	now := time.Now()
	l := &Lease{Version: leaseVersion, Session: session, Holder: holder, AcquiredNs: now.UnixNano(),
		RenewedNs: now.UnixNano(), ExpiresNs: now.Add(ttl).UnixNano(), TTLNs: int64(ttl)}
	ifMatch := ""
	if cur != nil {
		ours := cur.Holder == holder
		if cur.Live(now) && !ours && !steal {
			return nil, cur, r.leasedError(cur)
		}
		if cur.Live(now) && ours {
			// Taking it again renews it.
			l.Token, l.AcquiredNs = cur.Token, cur.AcquiredNs
		}
		ifMatch = cur.ETag
		if ifMatch == "" {
			return nil, cur, fmt.Errorf("remote %s: lease of %s: read without an ETag, cannot update it safely", r.cfg.Name, session)
		}
	}
	if l.Token == "" {
		if l.Token, err = newToken(); err != nil {
			return nil, cur, err
		}
	}
	if beforeLeaseWrite != nil {
		beforeLeaseWrite()
	}
	out, err := r.writeLease(ctx, l, ifMatch, cur == nil)
	return out, cur, err
}

// Renew extends l (as Acquire or Renew returned it) by its ttl from now.
// It fails with ErrLeased if the lease changed hands since: taken after
// its expiry, stolen or released.
func (r *Remote) Renew(ctx context.Context, l *Lease) (*Lease, error) {
	n := *l
	renewed := func() *Lease {
		now := time.Now()
		n.RenewedNs, n.ExpiresNs = now.UnixNano(), now.Add(time.Duration(l.TTLNs)).UnixNano()
		return &n
	}
	out, err := r.writeLease(ctx, renewed(), l.ETag, false)
	if !errors.Is(err, ErrLeased) {
		return out, err
	}
	// One of our own writes whose answer was lost (or the holder's own
	// acquire) moves the ETag too; the token, new at every acquisition
	// by another holder, tells that the lease is still ours.
	cur, cerr := r.Lease(ctx, l.Session)
	if cerr != nil || cur.Token != l.Token || cur.Holder != l.Holder || cur.Released {
		return nil, err
	}
	return r.writeLease(ctx, renewed(), cur.ETag, false)
}

// Release marks the lease of session released, if holder holds it. A
// lease that is absent or already released is no error; one held by
// another host, live or not, is ErrLeased.
func (r *Remote) Release(ctx context.Context, session string, holder Holder) (*Lease, error) {
	cur, err := r.Lease(ctx, session)
	if err != nil {
		return nil, err
	}
	if cur.Released {
		return cur, nil
	}
	if cur.Holder != holder {
		return nil, r.leasedError(cur)
	}
	n := *cur
	n.Released = true
	n.RenewedNs = time.Now().UnixNano()
	return r.writeLease(ctx, &n, cur.ETag, false)
}

// writeLease puts l under its conditions, then reads it back: a lease
// that does not hold l's token and times was overwritten by a racing host.
func (r *Remote) writeLease(ctx context.Context, l *Lease, ifMatch string, ifNoneMatch bool) (*Lease, error) {
	b, err := json.Marshal(l)
	if err != nil {
		return nil, err
	}
	_, err = r.putObject(ctx, r.leaseKey(l.Session), b, "application/json", ifMatch, ifNoneMatch)
	if err != nil && !errors.Is(err, ErrConflict) {
		return nil, err
	}
	now, rerr := r.Lease(ctx, l.Session)
	// A put that lost its condition to a racing host's can come back
	// before the winner's object is readable (seen on versitygw): read
	// again for a little while rather than report a race with no holder.
	for wait := 10 * time.Millisecond; err != nil && errors.Is(rerr, ErrNoLease) && wait < 2*time.Second; wait *= 2 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
		now, rerr = r.Lease(ctx, l.Session)
	}
	if rerr != nil {
		if err != nil {
			return nil, fmt.Errorf("remote %s: lease of %s: another host's write won the race, and reading who holds it failed: %v: %w", r.cfg.Name, l.Session, rerr, ErrLeased)
		}
		return nil, fmt.Errorf("remote %s: lease of %s: read back: %w", r.cfg.Name, l.Session, rerr)
	}
	// A retried put fails its condition when an earlier attempt went
	// through and only its answer was lost: the lease then holds our
	// bytes, to the nanosecond.
	if now.Token != l.Token || now.RenewedNs != l.RenewedNs || now.Released != l.Released {
		if now.Released {
			return nil, fmt.Errorf("remote %s: lease of %s was released by %s meanwhile: %w", r.cfg.Name, l.Session, now.Holder, ErrLeased)
		}
		return nil, r.leasedError(now)
	}
	return now, nil
}

func newToken() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return hex.EncodeToString(b[:]), nil
}
