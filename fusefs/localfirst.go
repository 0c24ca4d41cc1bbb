package fusefs

import (
	"context"
	"errors"
	"fmt"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// callModes are the cancel channels the gate hands go-fuse with a request
// (never closed: nothing is cancelled), since go-fuse gives a node neither
// the request's flags nor anything of the gate's: by bits, modeFlag for a
// READ through an O_NOATIME descriptor (readMode) or a WRITE that appends
// (writeMode), modeLocal for a request to serve from local data alone
// (localGate). A plain request's is nil.
var callModes = [4]chan struct{}{nil, make(chan struct{}), make(chan struct{}), make(chan struct{})}

const (
	modeFlag = 1 << iota
	modeLocal
)

// callMode returns the cancel channel of a request with the flag bit set
// or not, served from local data alone or not.
func callMode(flag, local bool) <-chan struct{} {
	m := 0
	if flag {
		m |= modeFlag
	}
	if local {
		m |= modeLocal
	}
	return callModes[m]
}

// callBits returns the callModes bits of the request of ctx.
func callBits(ctx context.Context) int {
	fc, ok := ctx.(*fuse.Context)
	if !ok || fc.Cancel == nil {
		return 0
	}
	for m := 1; m < len(callModes); m++ {
		if fc.Cancel == callModes[m] {
			return m
		}
	}
	return 0
}

// appending reports whether the WRITE of ctx appends.
func appending(ctx context.Context) bool { return callBits(ctx)&modeFlag != 0 }

// localCtx is the store context of a request a ring thread serves from
// local data alone (localGate), once the node took what it needs of the
// request's own (its caller): the session uses its context only to reach
// the store, and the gate's never ends, so one shared context spares
// every such request an allocation.
var localCtx = cas.LocalOnly(context.Background())

// storeCtx returns the context a node hands the session for the request
// of ctx: localCtx for one from localGate, ctx itself otherwise.
func storeCtx(ctx context.Context) context.Context {
	if callBits(ctx)&modeLocal != 0 {
		return localCtx
	}
	return ctx
}

// localFirst runs op, which takes the locks it needs, on local data alone
// (cas.LocalOnly) and, while op fails for data that only a remote has
// (cas.ErrNotLocal, having changed nothing), fetches what n's content in
// [off, end) rests on with no lock held (fetchSpan) and runs it again; so
// a slow remote holds no lock of n, nor of the session, and no stat or
// listing waits for it. Under cas.LocalOnly itself (a ring thread) op
// runs once, and its cas.ErrNotLocal sends the request off the ring.
// Past localRounds (the chunks fetched keep leaving the store), op runs
// with the remote allowed. A fetch that fails is a *fetchFailed: op is
// not run again, which would wait for the failing remote with its locks
// held.
func (s *Session) localFirst(ctx context.Context, n *node, off, end int64, op func(context.Context) error) error {
	if cas.IsLocalOnly(ctx) {
		return op(ctx)
	}
	local := cas.LocalOnly(ctx)
	for range localRounds {
		err := op(local)
		if !errors.Is(err, cas.ErrNotLocal) {
			return err
		}
		if err := s.fetchSpan(ctx, n, off, end); err != nil {
			return &fetchFailed{err}
		}
	}
	return op(ctx)
}

// appendSpan, as both ends of localFirst's span, stands for what an
// append reads: the chunk at the end of the file.
const appendSpan = -1

// fetchFailed is the error of localFirst's fetch with no lock held.
type fetchFailed struct{ err error }

func (e *fetchFailed) Error() string { return e.err.Error() }
func (e *fetchFailed) Unwrap() error { return e.err }

// fetchFailedErr reports whether err is (or wraps) a *fetchFailed.
func fetchFailedErr(err error) bool {
	var failed *fetchFailed
	return errors.As(err, &failed)
}

// localRounds bounds the tries of localFirst on local data alone.
const localRounds = 3

// fetchSpan brings what n's content in [off, end) rests on into the local
// store: its chunk list, and the stored chunks of the span, its overlays'
// bases included. A remote fetches them (remote.ReadThrough) and the
// local store keeps them, so that a try under cas.LocalOnly finds them.
// Called with no lock held.
func (s *Session) fetchSpan(ctx context.Context, n *node, off, end int64) error {
	refs, base, err := n.spanRefs(off, end)
	if err != nil {
		return err
	}
	if base != nil {
		if _, err := manifest.LoadChunkList(ctx, s.store, base); err != nil {
			return fmt.Errorf("load chunk list of inode %d: %w", n.ino, err)
		}
		if refs, _, err = n.spanRefs(off, end); err != nil {
			return err
		}
	}
	for _, ref := range refs {
		if _, ok := s.pending.get(ref); ok {
			continue
		}
		if _, err := s.store.Get(ctx, ref); err != nil {
			return fmt.Errorf("fetch chunk of inode %d: %w", n.ino, err)
		}
	}
	return nil
}

// spanRefs returns the stored chunks under n's content in [off, end), or,
// with none, the entry whose chunk list the local store lacks (a copy, to
// load with no lock held).
func (n *node) spanRefs(off, end int64) ([]cas.Ref, *manifest.Entry, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	d := n.data
	if n.kind != manifest.KindFile || d == nil {
		return nil, nil, nil
	}
	if off == appendSpan || off >= d.size {
		// An append, or a write or truncate past the end: growing the
		// file reads its last chunk (and its chunk list).
		off, end = d.size-1, d.size
	}
	off, end = max(off, 0), min(end, d.size)
	if off >= end {
		return nil, nil, nil
	}
	if err := n.loadChunks(localCtx); err != nil {
		if !errors.Is(err, cas.ErrNotLocal) {
			return nil, nil, err
		}
		base := d.base
		return nil, &base, nil
	}
	var refs []cas.Ref
	for i := int(off / manifest.ChunkSize); int64(i)*manifest.ChunkSize < end; i++ {
		ref := cas.Ref{}
		if c, ok := d.dirty[i]; ok {
			if !c.whole {
				ref = c.base
			}
		} else if i < d.chunks.Len() {
			ref = d.chunks.At(i)
		}
		if !ref.IsZero() {
			refs = append(refs, ref)
		}
	}
	return refs, nil, nil
}

// fetchBases brings the stored chunks under the overlays of the session's
// changed files (the bases a flush or a spill merges them with, under the
// files' locks and, for a flush, with every writer held back) into the
// chunk cache and the local store, with no lock held. Under cas.LocalOnly
// it answers cas.ErrNotLocal for a base the local store lacks. A base
// already local costs a lookup in the chunk cache, which the merge then
// finds it in.
func (s *Session) fetchBases(ctx context.Context) error {
	for _, n := range s.dirtyFiles() {
		for _, ref := range n.overlayBases() {
			if _, ok := s.pending.get(ref); ok {
				continue
			}
			if err := s.chunks.warm(ctx, ref); err != nil {
				return fmt.Errorf("base of an overlay of inode %d: %w", n.ino, err)
			}
		}
	}
	return nil
}

// overlayBases returns the bases of n's overlays.
func (n *node) overlayBases() []cas.Ref {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.data == nil {
		return nil
	}
	var refs []cas.Ref
	for _, c := range n.data.dirty {
		if !c.whole && !c.base.IsZero() {
			refs = append(refs, c.base)
		}
	}
	return refs
}
