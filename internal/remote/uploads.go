package remote

import (
	"context"
	"fmt"
	"sync"

	"github.com/homefs/homefs/cas"
)

// uploads coalesces the uploads of concurrent pushes through one Remote
// (one process): a push about to upload an object that another push is
// uploading waits for that upload instead, and one that finds the object
// uploaded by another push since its own lock was taken skips it.
//
// Such a skip is as safe against gc as an existence check (the argument is
// in docs/ARCHITECTURE-remote.md, "Concurrent pushes from one host"): no gc
// deletes anything while a push holds its lock, so an object confirmed on
// the remote after a push took its lock stays there until that push lets
// go of it. An upload therefore counts for another push only when it
// completed after that push joined (seq), and when the uploader's own lock
// still held at that moment (an upload sent before the other push joined
// landed under it).
type uploads struct {
	mu sync.Mutex
	// seq orders joins and confirmations: a confirmation numbered above a
	// push's join came after it. GUARDED_BY(mu).
	seq uint64
	// active holds the join numbers of the pushes running. GUARDED_BY(mu).
	active map[uint64]struct{}
	// inflight holds the uploads under way. GUARDED_BY(mu).
	inflight map[cas.Ref]*upload
	// done holds the confirmation number of each upload finished while
	// another push ran; pruned as pushes end. GUARDED_BY(mu).
	done map[cas.Ref]uint64
}

type upload struct{ done chan struct{} }

func newUploads() *uploads {
	return &uploads{
		active:   make(map[uint64]struct{}),
		inflight: make(map[cas.Ref]*upload),
		done:     make(map[cas.Ref]uint64),
	}
}

// join registers a push that holds its lock and returns its join number.
func (u *uploads) join() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seq++
	u.active[u.seq] = struct{}{}
	return u.seq
}

// leave unregisters the push joined as since and forgets the confirmations
// that no running push may trust any more.
func (u *uploads) leave(since uint64) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.active, since)
	if len(u.active) == 0 {
		clear(u.done)
		return
	}
	oldest := u.seq
	for s := range u.active {
		oldest = min(oldest, s)
	}
	for ref, s := range u.done {
		if s <= oldest {
			delete(u.done, ref)
		}
	}
}

// put uploads ref with send, for the push joined as since and holding l,
// unless another push of this process uploaded ref after since, or is
// uploading it now: then put waits for that upload and, if it failed,
// tries itself. It reports whether this call sent the object.
func (u *uploads) put(ctx context.Context, since uint64, l *lock, ref cas.Ref, send func(context.Context) error) (bool, error) {
	for {
		u.mu.Lock()
		if s, ok := u.done[ref]; ok && s > since {
			u.mu.Unlock()
			return false, nil
		}
		if c, ok := u.inflight[ref]; ok {
			u.mu.Unlock()
			select {
			case <-c.done:
				continue
			case <-ctx.Done():
				return false, fmt.Errorf("upload %s: %w", ref.Short(), ctx.Err())
			}
		}
		c := &upload{done: make(chan struct{})}
		u.inflight[ref] = c
		u.mu.Unlock()

		err := send(ctx)
		// An upload counts for others only while its lock held.
		held := err == nil && l.check() == nil
		u.mu.Lock()
		delete(u.inflight, ref)
		if held && len(u.active) > 1 {
			u.seq++
			u.done[ref] = u.seq
		}
		u.mu.Unlock()
		close(c.done)
		return err == nil, err
	}
}
