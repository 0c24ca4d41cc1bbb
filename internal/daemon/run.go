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

	"homefs/fusefs"
	"homefs/manifest"
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
}

// RunDirFor is the directory under which the daemon of root mounts
// sessions for homefs run.
func RunDirFor(root string) string {
	sum := sha256.Sum256([]byte(filepath.Clean(root)))
	return filepath.Join("/run/homefs", hex.EncodeToString(sum[:6]))
}

// RunMountInfo is the mount a run binds from.
type RunMountInfo struct {
	Dir    string           `json:"dir"`
	Layout *manifest.Layout `json:"layout,omitempty"`
}

// RunMount holds a whole-session mount of session for a run and returns
// its directory; release gives it back.
func (s *Service) RunMount(ctx context.Context, session string) (*RunMountInfo, func(), error) {
	if err := manifest.ValidateSessionName(session); err != nil {
		return nil, nil, err
	}
	h, err := s.cat.Head(ctx, session)
	if err != nil {
		return nil, nil, err
	}
	s.runMu.Lock()
	hold := s.runs[session]
	if hold == nil {
		hold = &runHold{ready: make(chan struct{})}
		s.runs[session] = hold
		hold.runs++
		s.runMu.Unlock()
		hold.dir, hold.ours, hold.err = s.runMountFor(ctx, session)
		close(hold.ready)
		if hold.err != nil {
			s.runMu.Lock()
			delete(s.runs, session)
			s.runMu.Unlock()
			return nil, nil, hold.err
		}
	} else {
		hold.runs++
		s.runMu.Unlock()
		<-hold.ready
		if hold.err != nil {
			return nil, nil, hold.err
		}
	}
	s.log.Info("run started", "session", session, "dir", hold.dir)
	release := func() { s.releaseRun(session, hold) }
	return &RunMountInfo{Dir: hold.dir, Layout: h.Layout}, release, nil
}

// runMountFor finds or makes the mount a run of session binds from.
func (s *Service) runMountFor(ctx context.Context, session string) (string, bool, error) {
	s.mu.Lock()
	for _, m := range s.mounts {
		if m.Session == session && m.Subtree == "" && m.Snapshot == "" && !m.ReadOnly && !m.Private {
			s.mu.Unlock()
			return m.Dir, false, nil
		}
	}
	s.mu.Unlock()
	dir := filepath.Join(s.runDir, session)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("run directory: %w", err)
	}
	m, err := s.Mount(ctx, MountRequest{Session: session, Dir: dir})
	if err != nil {
		return "", false, err
	}
	return m.Dir, true, nil
}

// releaseRun ends one run's hold; the last one unmounts a mount made for
// runs. The kernel may still be releasing the run's files: a busy mount
// is retried for a while before it is left for homefs unmount.
func (s *Service) releaseRun(session string, hold *runHold) {
	// The unmount happens under runMu, so that a run starting meanwhile
	// waits for it rather than binding from a mount about to go.
	s.runMu.Lock()
	defer s.runMu.Unlock()
	hold.runs--
	s.log.Info("run ended", "session", session, "runs", hold.runs)
	if hold.runs > 0 {
		return
	}
	delete(s.runs, session)
	if !hold.ours {
		return
	}
	ctx := context.Background()
	s.mu.Lock()
	info, ok := s.mounts[hold.dir]
	s.mu.Unlock()
	if !ok {
		return
	}
	var err error
	for wait := 50 * time.Millisecond; wait < 10*time.Second; wait *= 2 {
		if _, err = s.unmount(ctx, hold.dir, info); err == nil || !errors.Is(err, fusefs.ErrBusy) {
			break
		}
		time.Sleep(wait)
	}
	if err != nil {
		s.log.Error("could not unmount a run's mount; unmount it with homefs unmount", "dir", hold.dir, "err", err)
		return
	}
	_ = os.Remove(hold.dir)
}

// heldByRun reports whether a run binds from the mount at dir.
func (s *Service) heldByRun(dir string) bool {
	s.runMu.Lock()
	defer s.runMu.Unlock()
	for _, h := range s.runs {
		if h.dir == dir {
			return true
		}
	}
	return false
}
