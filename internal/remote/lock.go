package remote

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
)

// Locks under PREFIX/locks/ keep gc and pushes apart (see
// docs/ARCHITECTURE-remote.md, "gc"): a push holds a push lock from before
// its first existence check until after it moved the head, a gc holds a gc
// lock from before it marks until its last delete. Each writes its own
// lock, then lists the others': a push that sees a gc lock withdraws and
// waits; a gc that sees push locks waits for them to go.
const locksDir = "locks/"

// Lock kinds, the first part of a lock's name.
const (
	lockPush = "push"
	lockGC   = "gc"
)

// Lock timing. A lock not rewritten for LockStale (by the server's clock)
// is a dead host's and is ignored; holders rewrite theirs every
// LockStale/6 and stop trusting it once no rewrite landed for LockStale/2.
const (
	LockStale    = 30 * time.Minute
	lockPoll     = time.Second
	lockMaxPoll  = 5 * time.Second
	lockRefreshN = 6
)

// ErrLockLapsed is the error of a push or gc that could not rewrite its
// lock for half the stale time, so the other side may already ignore it.
// Rerun.
var ErrLockLapsed = errors.New("remote: lock lapsed (the remote did not take its rewrite in time)")

type lockBody struct {
	Kind      string `json:"kind"`
	Host      string `json:"host"`
	PID       int    `json:"pid"`
	CreatedNs int64  `json:"created_ns"`
}

// lock is one held lock. Its rewrites run in a goroutine until release.
type lock struct {
	r    *Remote
	key  string
	name string
	body []byte
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	landed time.Time // GUARDED_BY(mu): when the last write returned
}

func (r *Remote) writeLock(ctx context.Context, kind string) (*lock, error) {
	var id [8]byte
	if _, err := rand.Read(id[:]); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	body, err := json.Marshal(lockBody{Kind: kind, Host: host, PID: os.Getpid(), CreatedNs: time.Now().UnixNano()})
	if err != nil {
		return nil, err
	}
	name := kind + "-" + hex.EncodeToString(id[:])
	l := &lock{r: r, key: r.prefix + locksDir + name, name: name, body: body}
	if _, err := r.putObject(ctx, l.key, body, "application/json", "", false); err != nil {
		return nil, fmt.Errorf("%s lock: %w", kind, err)
	}
	l.landed = time.Now()
	return l, nil
}

// others lists the fresh locks of kind other than l, judged by the
// server's clock: a lock is stale when l's own write is LockStale newer.
func (l *lock) others(ctx context.Context, kind string) ([]string, error) {
	var own time.Time
	type seen struct {
		name string
		mod  time.Time
	}
	var all []seen
	err := l.r.listObjects(ctx, locksDir, func(o object) error {
		if o.name == l.name {
			own = o.modified
		} else if strings.HasPrefix(o.name, kind+"-") {
			all = append(all, seen{o.name, o.modified})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if own.IsZero() {
		return nil, fmt.Errorf("remote %s: lock %s: not listed after it was written", l.r.cfg.Name, l.name)
	}
	var fresh []string
	for _, s := range all {
		if own.Sub(s.mod) < LockStale {
			fresh = append(fresh, s.name)
		}
	}
	return fresh, nil
}

// hold starts rewriting the lock.
func (l *lock) hold() {
	l.stop, l.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(l.done)
		t := time.NewTicker(LockStale / lockRefreshN)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), LockStale/lockRefreshN)
			_, err := l.r.putObject(ctx, l.key, l.body, "application/json", "", false)
			cancel()
			if err != nil {
				l.r.log.Warn("remote lock not rewritten", "remote", l.r.cfg.Name, "lock", l.name, "err", err)
				continue
			}
			l.mu.Lock()
			l.landed = time.Now()
			l.mu.Unlock()
		}
	}()
}

// check fails once the lock may be ignored by others: no rewrite landed
// for LockStale/2 (by this host's clock, which runs no faster than the
// server's by more than that margin).
func (l *lock) check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if time.Since(l.landed) > LockStale/2 {
		return fmt.Errorf("remote %s: lock %s: %w", l.r.cfg.Name, l.name, ErrLockLapsed)
	}
	return nil
}

// release stops the rewrites and deletes the lock. It runs even when ctx
// is done: a lock left behind blocks the other side until it is stale.
func (l *lock) release() {
	if l.stop != nil {
		close(l.stop)
		<-l.done
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := l.r.deleteObject(ctx, l.key); err != nil {
		l.r.log.Warn("remote lock not deleted", "remote", l.r.cfg.Name, "lock", l.name, "err", err)
	}
}

// lockPush takes a push lock: write it, then look for gc locks; while
// there is one, withdraw, wait for every gc lock to go, and try again.
func (r *Remote) lockPush(ctx context.Context) (*lock, error) {
	for {
		l, err := r.writeLock(ctx, lockPush)
		if err != nil {
			return nil, err
		}
		gcs, err := l.others(ctx, lockGC)
		if err != nil {
			l.release()
			return nil, err
		}
		if len(gcs) == 0 {
			l.hold()
			return l, nil
		}
		l.release()
		r.log.Info("push waits for remote gc", "remote", r.cfg.Name, "gc", gcs[0])
		if err := r.waitGone(ctx, lockGC); err != nil {
			return nil, err
		}
	}
}

// waitGone polls the locks until none of kind is fresh. Freshness is
// judged against a probe lock of its own that it writes each round (the
// server's clock again).
func (r *Remote) waitGone(ctx context.Context, kind string) error {
	delay := lockPoll
	for {
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, lockMaxPoll)
		probe, err := r.writeLock(ctx, "wait")
		if err != nil {
			return err
		}
		left, err := probe.others(ctx, kind)
		probe.release()
		if err != nil {
			return err
		}
		if len(left) == 0 {
			return nil
		}
	}
}

// lockGCFor takes a gc lock and waits until no fresh push lock is left:
// pushes that started before it finish, later ones see the gc lock and
// wait. It returns how many push locks it waited for.
func (r *Remote) lockGCFor(ctx context.Context) (*lock, int, error) {
	l, err := r.writeLock(ctx, lockGC)
	if err != nil {
		return nil, 0, err
	}
	l.hold()
	waited := make(map[string]bool)
	delay := lockPoll
	for {
		pushes, err := l.others(ctx, lockPush)
		if err != nil {
			l.release()
			return nil, 0, err
		}
		if len(pushes) == 0 {
			return l, len(waited), nil
		}
		for _, p := range pushes {
			if !waited[p] {
				r.log.Info("remote gc waits for a push", "remote", r.cfg.Name, "push", p)
			}
			waited[p] = true
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			l.release()
			return nil, 0, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, lockMaxPoll)
	}
}
