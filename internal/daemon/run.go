package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/manifest"
)

// homefs run shows a session's parts at its canonical paths in a private
// mount namespace, by bind mounts of a whole-session mount the daemon
// serves. A run holds that mount for as long as its request to the daemon
// stays open (RunMount): an existing mount of the whole session that every
// user may enter is shared, else the daemon mounts the session under its
// run directory and unmounts it when the last run holding it ends, also
// when a run dies (its connection closes). Such a mount is the daemon's
// own and shows up in its mount list while a run holds it.

// runHold is a whole-session mount held by runs. GUARDED_BY(Service.runMu).
type runHold struct {
	dir   string
	runs  int
	ours  bool // made for runs: unmounted when the last one ends
	ready chan struct{}
	err   error // set before ready closes
	// ending is set while the last run's release unmounts a mount made
	// for runs, and closed once it is done: a run of the session starting
	// meanwhile waits for it rather than binding from a mount about to go.
	ending chan struct{}
}

// RunDirFor is the directory under which the daemon of root mounts
// sessions for homefs run.
func RunDirFor(root string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return filepath.Join("/run/homefs", hex.EncodeToString(sum[:6]))
}

// RunMount holds a whole-session mount of session for a run and returns
// its directory; release gives it back. With lease (a remote's name, ""
// for none), the session's lease on that remote is taken first and given
// back after the run's hold (leaseForRun).
func (s *Service) RunMount(ctx context.Context, session, lease string) (*api.RunMountInfo, func(), error) {
	if err := manifest.ValidateSessionName(session); err != nil {
		return nil, nil, err
	}
	h, err := s.cat.Head(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	undoLease, endLease := func() {}, func() {}
	if lease != "" {
		if undoLease, endLease, err = s.leaseForRun(ctx, session, lease); err != nil {
			return nil, nil, err
		}
	}
	hold, first, err := s.holdRun(ctx, session)
	if err != nil {
		undoLease()
		return nil, nil, err
	}
	if first {
		err := s.runMountFor(ctx, session, hold)
		s.runMu.Lock()
		hold.err = err
		if err != nil {
			delete(s.runs, session)
		}
		s.runMu.Unlock()
		close(hold.ready)
	}
	<-hold.ready
	if hold.err != nil {
		undoLease()
		return nil, nil, hold.err
	}
	s.runMu.Lock()
	dir := hold.dir
	s.runMu.Unlock()
	s.log.Info("run started", "session", session, "dir", dir)
	release := func() {
		s.releaseRun(session, hold)
		endLease()
	}
	return &api.RunMountInfo{Dir: dir, Layout: h.Layout}, release, nil
}

// holdRun counts a run in session's hold, made if the session has none
// (first), once a mount of the session that the last run left is gone.
func (s *Service) holdRun(ctx context.Context, session string) (hold *runHold, first bool, err error) {
	for {
		s.runMu.Lock()
		hold = s.runs[session]
		if hold == nil || hold.ending == nil {
			break
		}
		ending := hold.ending
		s.runMu.Unlock()
		select {
		case <-ending:
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
	first = hold == nil
	if first {
		hold = &runHold{ready: make(chan struct{})}
		s.runs[session] = hold
	}
	hold.runs++
	s.runMu.Unlock()
	return hold, first, nil
}

// runMountFor finds or makes the mount a run of session binds from and
// records it in hold. A mount of the daemon's is shared only while the
// kernel still has it (someone may have unmounted it behind the daemon's
// back); it is chosen and recorded under both locks, so that an unmount
// cannot slip between the choice and the hold.
func (s *Service) runMountFor(ctx context.Context, session string, hold *runHold) error {
	s.runMu.Lock()
	s.mu.Lock()
	for _, m := range s.mounts {
		if m.Session == session && m.Subtree == "" && m.Snapshot == "" && !m.ReadOnly && !m.Private {
			if ok, err := isMountpoint(m.Dir); err == nil && ok {
				hold.dir = m.Dir
				s.mu.Unlock()
				s.runMu.Unlock()
				return nil
			}
			s.log.Warn("a recorded mount is gone from the mount table; not sharing it", "dir", m.Dir, "session", session)
		}
	}
	s.mu.Unlock()
	s.runMu.Unlock()
	// Only root reaches the run's mounts: the binds are made from
	// descriptors, and nobody else needs the path (another user would read
	// a running session's files there).
	if err := os.MkdirAll(s.runDir, 0o700); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if err := os.Chmod(filepath.Dir(s.runDir), 0o700); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	if err := os.Chmod(s.runDir, 0o700); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	dir := filepath.Join(s.runDir, session)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("run directory: %w", err)
	}
	m, err := s.Mount(ctx, api.MountRequest{Session: session, Dir: dir})
	if err != nil {
		return err
	}
	s.runMu.Lock()
	hold.dir, hold.ours = m.Dir, true
	s.runMu.Unlock()
	return nil
}

// releaseRun ends one run's hold; the last one unmounts a mount made for
// runs. The kernel may still be releasing the run's files: a busy mount
// is retried for a while, or until the service closes, before it is left
// for homefs unmount (or for the close, which unmounts every mount).
func (s *Service) releaseRun(session string, hold *runHold) {
	s.runMu.Lock()
	hold.runs--
	s.log.Info("run ended", "session", session, "runs", hold.runs)
	if hold.runs > 0 {
		s.runMu.Unlock()
		return
	}
	if !hold.ours {
		delete(s.runs, session)
		s.runMu.Unlock()
		return
	}
	// The hold stays, ending, while the mount goes: a run starting
	// meanwhile waits for it (holdRun) rather than binding from it. The
	// wait is not under runMu, which the other sessions' runs take.
	hold.ending = make(chan struct{})
	s.runMu.Unlock()
	s.unmountRun(hold)
	s.runMu.Lock()
	delete(s.runs, session)
	close(hold.ending)
	s.runMu.Unlock()
}

// unmountRun unmounts hold's mount, made for runs, retrying while it is
// busy for a while or until the service closes.
func (s *Service) unmountRun(hold *runHold) {
	s.mu.Lock()
	info, ok := s.mounts[hold.dir]
	s.mu.Unlock()
	if !ok {
		return
	}
	var err error
	for wait := 50 * time.Millisecond; wait < 10*time.Second; wait *= 2 {
		if _, err = s.unmount(context.Background(), hold.dir, info); err == nil || !errors.Is(err, fusefs.ErrBusy) {
			break
		}
		if !s.sleep(wait) {
			s.log.Info("a run's mount is left to the daemon's close", "dir", hold.dir)
			return
		}
	}
	if err != nil {
		if still, _ := isMountpoint(hold.dir); still {
			s.log.Error("could not unmount a run's mount; unmount it with homefs unmount", "dir", hold.dir, "err", err)
			return
		}
		// Gone already (unmounted behind the daemon's back): forget it.
		s.log.Warn("a run's mount was already gone", "dir", hold.dir, "err", err)
		s.mu.Lock()
		delete(s.mounts, hold.dir)
		if werr := s.saveMountsLocked(); werr != nil {
			s.log.Error("could not record mounts", "err", werr)
		}
		s.mu.Unlock()
	}
	_ = os.Remove(hold.dir)
	_ = os.Remove(s.runDir) // only once no session of this daemon runs
}

// sleep waits for d, and reports false at once if the service closes
// first.
func (s *Service) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-s.life.Done():
		return false
	}
}

// heldByRun reports whether a run binds from the mount at dir.
func (s *Service) heldByRun(dir string) bool {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	for _, h := range s.runs {
		if h.dir == dir && h.ending == nil {
			return true
		}
	}
	return false
}
