package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/archive"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/fsck"
	"github.com/homefs/homefs/internal/remote"
	"github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/manifest"
)

// Service is every operation the daemon serves, over one store. It is safe
// for concurrent use.
type Service struct {
	root    string
	rt      *remote.ReadThrough // the local store, with the remotes behind it
	remotes *remote.Service
	rec     *fusefs.Recorder
	cat     *catalog.Catalog
	eng     *fusefs.Engine
	log     *slog.Logger
	started time.Time
	socket  string
	metrics *metrics // nil unless --metrics
	// homes remembers the provider homes found in each directory tree:
	// fork, restore and bind search the same trees again and again.
	homes fork.HomeFinder

	mu     sync.Mutex
	mounts map[string]api.MountInfo // by mountpoint; GUARDED_BY(mu)

	// lifeMu orders forgetting snapshots with mounting them: a snapshot
	// mount holds it from resolving the snapshot until the mount is
	// recorded, forget and purge while they decide and commit. Lock
	// order: lifeMu < mu.
	lifeMu sync.Mutex

	runDir string // where mounts for homefs run are made
	// runMu guards runs, the mounts held by homefs run (run.go). Lock
	// order: runMu before mu.
	runMu sync.Mutex
	runs  map[string]*runHold // by session; GUARDED_BY(runMu)
	// lostRuns counts the releases of runs whose request ended without
	// homefs run giving the hold back; Close waits for them.
	lostRuns sync.WaitGroup

	leases *leaseKeeper // the remote leases this daemon holds (lease.go)

	// life ends when Close begins: background waits (a run's busy mount)
	// give up then.
	life    context.Context
	endLife context.CancelFunc
}

// NewService serves store, whose directory lies in root. Reads go through
// the remotes of <root>/remotes.json (a chunk the local store lacks is
// fetched, checked and kept), and the catalog and the engine share one
// recording store, so that gc sees every put. The Service owns store from
// here on: CloseStore closes it.
func NewService(ctx context.Context, root string, store cas.Store, log *slog.Logger, uring fusefs.URingMode, grace time.Duration) (*Service, error) {
	return newService(ctx, root, store, log, uring, grace, nil, remote.Timeouts{}, false)
}

// newService is NewService feeding m (nil: no metrics), with remote
// requests bounded by rto; salvage loads sessions whose journal is damaged
// (fusefs.Options.SalvageJournals).
func newService(ctx context.Context, root string, store cas.Store, log *slog.Logger, uring fusefs.URingMode, grace time.Duration, m *metrics, rto remote.Timeouts, salvage bool) (*Service, error) {
	rt := remote.NewReadThrough(store, remote.ReadThroughOptions{Logger: log.With("component", "remote")})
	remotes, err := remote.NewService(root, rt, remote.Options{Open: s3.Open, Timeouts: rto, Logger: log.With("component", "remote")})
	if err != nil {
		rt.Close()
		return nil, err
	}
	// Snapshots pulled lazily before a restart read from these.
	if err := remotes.OpenAll(ctx); err != nil {
		log.Warn("remotes: lazy reads from them will fail until this is fixed", "err", err)
	}
	rec := fusefs.Record(rt)
	cat := catalog.New(rec)
	eng := fusefs.New(rec, cat, fusefs.Options{StoreDir: root, Logger: log, URing: uring, ShutdownGrace: grace, Observer: m.observer(), SalvageJournals: salvage})
	life, endLife := context.WithCancel(context.Background())
	return &Service{root: root, rt: rt, remotes: remotes, rec: rec, cat: cat, eng: eng, log: log, started: time.Now(), metrics: m, mounts: make(map[string]api.MountInfo), runDir: RunDirFor(root), runs: make(map[string]*runHold), leases: newLeaseKeeper(root, log), life: life, endLife: endLife}, nil
}

// CloseStore stops background fetches and closes the store; call it after
// Close.
func (s *Service) CloseStore() error { return s.rt.Close() }

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// Sessions lists every session with its mounts.
func (s *Service) Sessions(ctx context.Context) ([]api.SessionInfo, error) {
	heads, err := s.cat.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	byName := make(map[string][]string)
	for _, m := range s.mounts {
		if m.Snapshot == "" {
			byName[m.Session] = append(byName[m.Session], m.Dir)
		}
	}
	s.mu.Unlock()
	out := make([]api.SessionInfo, 0, len(heads))
	for _, h := range heads {
		info := headInfo(&h)
		info.Mounts = byName[h.Session]
		out = append(out, *info)
	}
	return out, nil
}

// CreateSession creates a session, empty or from a snapshot spec.
func (s *Service) CreateSession(ctx context.Context, req api.CreateSessionRequest) (*api.SessionInfo, error) {
	var h *catalog.Head
	err := s.eng.Guard(func() error {
		from := req.From
		if from != "" {
			_, id, err := s.cat.Resolve(ctx, from)
			if err != nil {
				return err
			}
			from = id
		}
		opts := catalog.CreateOptions{Layout: req.Layout}
		if o := req.Owner; o != nil {
			opts.Owner = &catalog.Owner{UID: o.UID, GID: o.GID}
		} else if uid := os.Geteuid(); uid != 0 && req.From == "" {
			// The kernel checks modes: a daemon that is not root owns
			// what it creates, as a user's mkdir would.
			opts.Owner = &catalog.Owner{UID: uint32(uid), GID: uint32(os.Getegid())}
		}
		var err error
		h, err = s.cat.CreateSessionWith(ctx, req.Name, from, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("session created", "session", h.Session, "from", req.From)
	info := headInfo(h)
	if req.From != "" {
		if err := s.dropDerived(ctx, h.Session, info); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// RemoveSession deletes a session that is not mounted; with purge, every
// snapshot it captured is forgotten with it (refused while a mount shows
// one of them).
func (s *Service) RemoveSession(ctx context.Context, name string, purge bool) (*api.RemoveSessionResult, error) {
	if !purge {
		if err := s.eng.RemoveSession(ctx, name); err != nil {
			return nil, err
		}
		s.log.Info("session removed", "session", name)
		return &api.RemoveSessionResult{}, nil
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	ids, err := s.eng.PurgeSession(ctx, name, s.mountedSnapshots())
	if err != nil {
		return nil, err
	}
	s.log.Info("session purged", "session", name, "snapshots", len(ids))
	return &api.RemoveSessionResult{Forgotten: ids}, nil
}

// mountedSnapshots returns the snapshots mounts show, with why they are
// kept. A read-only mount of a session shows the root it was mounted with
// (which gc marks); its head's snapshot is protected as a head.
func (s *Service) mountedSnapshots() catalog.Protect {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := catalog.Protect{}
	for _, m := range s.mounts {
		if m.Snapshot != "" {
			p[m.Snapshot] = "mounted at " + m.Dir + " (unmount it first)"
		}
	}
	return p
}

// Forget forgets snapshots, by name or by a session's keep policy.
func (s *Service) Forget(ctx context.Context, req api.ForgetRequest) (*api.ForgetResult, error) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	protect := s.mountedSnapshots()
	res := &api.ForgetResult{DryRun: req.DryRun, Forgotten: []string{}}
	switch {
	case len(req.Snapshots) > 0 && req.Session != "":
		return nil, usagef("name snapshots or give --session with a policy, not both")
	case len(req.Snapshots) > 0:
		var ids []string
		for _, spec := range req.Snapshots {
			if manifest.ValidateSessionName(spec) == nil && !strings.Contains(spec, "@") {
				if _, err := s.cat.Head(ctx, spec); err == nil {
					return nil, usagef("%q is a session: forget names snapshots (SESSION@ID, or an id); use --session %s with a --keep-… policy, or session rm --purge", spec, spec)
				}
			}
			_, id, err := s.cat.Resolve(ctx, spec)
			if err != nil {
				return nil, err
			}
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
		}
		if !req.DryRun {
			if err := s.cat.Forget(ctx, ids, protect); err != nil {
				return nil, err
			}
		} else if err := s.cat.CheckForget(ctx, ids, protect); err != nil {
			return nil, err
		}
		res.Forgotten = ids
	case req.Session != "":
		ds, err := s.cat.ForgetPolicy(ctx, req.Session, req.Policy, protect, time.Local, req.DryRun)
		if err != nil {
			if errors.Is(err, catalog.ErrNoPolicy) {
				return nil, usagef("%v", err)
			}
			return nil, err
		}
		res.Policy, res.Decisions = req.Policy.String(), ds
		for _, d := range ds {
			if !d.Keep {
				res.Forgotten = append(res.Forgotten, d.ID)
			}
		}
	default:
		return nil, usagef("name the snapshots to forget, or give --session with a --keep-… policy")
	}
	if !req.DryRun {
		s.log.Info("forgot snapshots", "count", len(res.Forgotten), "session", req.Session, "policy", res.Policy)
	}
	return res, nil
}

// Mount mounts a session (or one of its snapshots) at a directory.
func (s *Service) Mount(ctx context.Context, req api.MountRequest) (*api.MountInfo, error) {
	if req.Dir == "" || !filepath.IsAbs(req.Dir) {
		return nil, usagef("mountpoint %q: want an absolute path", req.Dir)
	}
	if sess, sub, ok := strings.Cut(req.Session, "/"); ok {
		req.Session, req.Subtree = sess, strings.Trim(filepath.ToSlash(filepath.Join(sub, req.Subtree)), "/")
	}
	if err := manifest.ValidateSessionName(req.Session); err != nil {
		return nil, err
	}
	dir, err := filepath.EvalSymlinks(req.Dir)
	if err != nil {
		return nil, fmt.Errorf("mountpoint %s: %w", req.Dir, err)
	}
	if busy, err := isMountpoint(dir); err != nil {
		return nil, err
	} else if busy {
		return nil, fmt.Errorf("%w: %s is already a mountpoint (unmount it first)", fusefs.ErrBusy, dir)
	}
	opts := fusefs.MountOptions{ReadOnly: req.ReadOnly, AllowOther: !req.Private, Dev: req.Dev, NoAtime: req.NoAtime}
	if o := req.Owner; o != nil {
		opts.Owner = &fusefs.Owner{UID: o.UID, GID: o.GID}
	}
	if req.Lease != "" && (req.Remote != "" || req.Snapshot != "") {
		return nil, usagef("mount --lease holds a session for writing: not with --snapshot or --remote")
	}
	var m *fusefs.Mount
	info := api.MountInfo{Session: req.Session, Subtree: req.Subtree, ReadOnly: req.ReadOnly, Private: req.Private, Dev: req.Dev, NoAtime: req.NoAtime, Since: time.Now()}
	switch {
	case req.Remote != "":
		id, session, name, err := s.pullForMount(ctx, req)
		if err != nil {
			return nil, err
		}
		m, err = s.eng.MountSnapshot(ctx, "@"+id, req.Subtree, dir, opts)
		if err != nil {
			return nil, err
		}
		info.Session, info.Snapshot, info.ReadOnly, info.Remote = session, id, true, name
	case req.Snapshot != "":
		s.lifeMu.Lock()
		defer s.lifeMu.Unlock()
		_, id, err := s.cat.Resolve(ctx, req.Session+"@"+req.Snapshot)
		if err != nil {
			return nil, err
		}
		m, err = s.eng.MountSnapshot(ctx, "@"+id, req.Subtree, dir, opts)
		if err != nil {
			return nil, err
		}
		info.Snapshot, info.ReadOnly = id, true
	default:
		undo := func() {}
		if req.Lease != "" {
			if info.Lease, undo, err = s.leaseForMount(ctx, req.Session, req.Lease); err != nil {
				return nil, err
			}
		}
		m, err = s.eng.Mount(ctx, req.Session, req.Subtree, dir, opts)
		if err != nil {
			undo()
			return nil, err
		}
	}
	info.Dir, info.Transport = m.Dir(), m.Transport()
	s.mu.Lock()
	s.mounts[info.Dir] = info
	err = s.saveMountsLocked()
	s.mu.Unlock()
	if err != nil {
		s.log.Error("could not record mounts", "err", err)
	}
	s.log.Info("mounted", "session", info.Session, "subtree", info.Subtree, "snapshot", info.Snapshot, "dir", info.Dir, "read_only", info.ReadOnly, "transport", m.Transport())
	return &info, nil
}

func (s *Service) saveMountsLocked() error {
	list := make([]api.MountInfo, 0, len(s.mounts))
	for _, m := range s.mounts {
		list = append(list, m)
	}
	return writeMounts(s.root, list)
}

// Mounts lists the mounts.
func (s *Service) Mounts(ctx context.Context) []api.MountInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]api.MountInfo, 0, len(s.mounts))
	for _, m := range s.mounts {
		out = append(out, m)
	}
	return out
}

// Unmount detaches a mount and flushes its session durably.
func (s *Service) Unmount(ctx context.Context, dir string) (*api.MountInfo, error) {
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	s.mu.Lock()
	info, ok := s.mounts[dir]
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s is not a homefs mount of this daemon", fusefs.ErrNotMounted, dir)
	}
	if s.heldByRun(dir) {
		return nil, fmt.Errorf("%w: %s: homefs run shows this mount elsewhere; end the run first", fusefs.ErrBusy, dir)
	}
	return s.unmount(ctx, dir, info)
}

// unmount is Unmount of a mount of this daemon, without the check for
// runs.
func (s *Service) unmount(ctx context.Context, dir string, info api.MountInfo) (*api.MountInfo, error) {
	if err := s.eng.Unmount(dir); err != nil {
		if still, _ := isMountpoint(dir); still {
			// The kernel refused (EBUSY): keep the cause out of the
			// classification, it may be any error of the unmount helper.
			return nil, fmt.Errorf("%w: %s: close the files open under it and leave it (cd), then retry (%v)", fusefs.ErrBusy, dir, err)
		}
		return nil, err
	}
	s.mu.Lock()
	delete(s.mounts, dir)
	err := s.saveMountsLocked()
	s.mu.Unlock()
	if err != nil {
		s.log.Error("could not record mounts", "err", err)
	}
	s.releaseMountLease(ctx, info)
	if info.Snapshot == "" && !info.ReadOnly {
		if err := s.eng.Sync(ctx, info.Session); err != nil && !errors.Is(err, catalog.ErrNoSession) {
			return nil, fmt.Errorf("flush %s after unmount: %w", info.Session, err)
		}
	}
	s.log.Info("unmounted", "dir", dir, "session", info.Session)
	return &info, nil
}

// Capture snapshots a session.
func (s *Service) Capture(ctx context.Context, session string, req api.CaptureRequest) (*api.SnapshotInfo, error) {
	for p, h := range req.Handles {
		if p == "" || h.ID == "" {
			return nil, usagef("handle %q=%q: want PROVIDER=ID[@THROUGH]", p, h.ID)
		}
	}
	var snap *manifest.Snapshot
	var id string
	start := time.Now()
	err := s.eng.Guard(func() error {
		var err error
		snap, id, err = s.eng.Capture(ctx, session, req.Message, req.Handles)
		return err
	})
	s.metrics.capture(time.Since(start), err)
	if err != nil {
		return nil, err
	}
	s.log.Info("captured", "session", session, "snapshot", id)
	return snapshotInfo(id, snap, false), nil
}

func snapshotInfo(id string, snap *manifest.Snapshot, forkPoint bool) *api.SnapshotInfo {
	return &api.SnapshotInfo{
		ID: id, Session: snap.Session, Parent: snap.Parent, Origin: snap.Origin,
		Created: time.Unix(0, snap.CreatedNs), Message: snap.Message, Handles: snap.Handles,
		Root: snap.Root, ForkPoint: forkPoint,
	}
}

// Log returns a session's history, newest first, across forks.
func (s *Service) Log(ctx context.Context, session string) ([]api.SnapshotInfo, error) {
	entries, err := s.cat.LogOf(ctx, session)
	if err != nil {
		return nil, err
	}
	out := make([]api.SnapshotInfo, 0, len(entries))
	for _, e := range entries {
		if e.Forgotten {
			out = append(out, api.SnapshotInfo{ID: e.ID, Session: e.Session, ForkPoint: e.ForkPoint, Forgotten: true})
			continue
		}
		out = append(out, *snapshotInfo(e.ID, e.Snapshot, e.ForkPoint))
	}
	return out, nil
}

// Fork creates Target from SOURCE[@SNAPSHOT]; a bare session is captured
// first.
func (s *Service) Fork(ctx context.Context, req api.ForkRequest) (*api.SessionInfo, error) {
	if err := manifest.ValidateSessionName(req.Target); err != nil {
		return nil, err
	}
	var h *catalog.Head
	err := s.eng.Guard(func() error {
		var err error
		h, err = s.eng.Fork(ctx, req.Source, req.Target)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("forked", "source", req.Source, "target", req.Target)
	info := headInfo(h)
	if err := s.dropDerived(ctx, h.Session, info); err != nil {
		return nil, err
	}
	return info, nil
}

// Restore points a session at a snapshot. A snapshot that is not in the
// session's own history (another session's, or a same-named session's
// from another host) is restored like a fork in place: its providers'
// derived state is dropped.
func (s *Service) Restore(ctx context.Context, session string, req api.RestoreRequest) (*api.SessionInfo, error) {
	h, err := s.cat.Head(ctx, session)
	if err != nil {
		return nil, err
	}
	_, id, err := s.cat.Resolve(ctx, req.Snapshot)
	if err != nil {
		return nil, err
	}
	own, err := s.cat.InHistory(ctx, h, id)
	if err != nil {
		return nil, err
	}
	err = s.eng.Guard(func() error { return s.eng.Restore(ctx, session, req.Snapshot) })
	if err != nil {
		return nil, err
	}
	s.log.Info("restored", "session", session, "snapshot", id, "own_history", own)
	if h, err = s.cat.Head(ctx, session); err != nil {
		return nil, err
	}
	info := headInfo(h)
	if !own {
		if err := s.dropDerived(ctx, session, info); err != nil {
			return nil, err
		}
	}
	return info, nil
}

// SetLayout replaces a session's layout.
func (s *Service) SetLayout(ctx context.Context, session string, req api.SetLayoutRequest) (*api.SessionInfo, error) {
	if req.Layout != nil {
		req.Layout.Normalize()
	}
	h, err := s.eng.SetLayout(ctx, session, req.Layout)
	if err != nil {
		return nil, err
	}
	s.log.Info("layout set", "session", session, "layout", req.Layout)
	return headInfo(h), nil
}

// headInfo is a head as listed.
func headInfo(h *catalog.Head) *api.SessionInfo {
	return &api.SessionInfo{
		Name: h.Session, Root: h.Root, Snapshot: h.Snapshot, Origin: h.Origin,
		Created: time.Unix(0, h.CreatedNs), Updated: time.Unix(0, h.UpdatedNs),
		Layout: h.Layout,
	}
}

// rootOf resolves a diff operand: a session (its current tree, flushed)
// or a snapshot spec.
func (s *Service) rootOf(ctx context.Context, spec string) (cas.Ref, string, error) {
	if !strings.Contains(spec, "@") && manifest.ValidateSessionName(spec) == nil {
		if _, err := s.cat.Head(ctx, spec); err == nil {
			root, err := s.eng.Root(ctx, spec)
			return root, "session " + spec, err
		}
	}
	snap, id, err := s.cat.Resolve(ctx, spec)
	if err != nil {
		return cas.Ref{}, "", err
	}
	return snap.Root, "snapshot " + id[:12] + " of " + snap.Session, nil
}

// Diff lists the paths that differ between a and b (sessions or
// snapshots). Directories present on both sides are left out: their
// content is listed instead.
func (s *Service) Diff(ctx context.Context, a, b string) (*api.DiffResult, error) {
	ra, da, err := s.rootOf(ctx, a)
	if err != nil {
		return nil, err
	}
	rb, db, err := s.rootOf(ctx, b)
	if err != nil {
		return nil, err
	}
	res := &api.DiffResult{A: da, B: db, Entries: []api.DiffEntry{}}
	err = manifest.Diff(ctx, s.rec, ra, rb, func(p string, old, new *manifest.Entry) error {
		d := api.DiffEntry{Path: p}
		switch {
		case old == nil:
			d.Change, d.Kind, d.NewSize = api.Added, new.Kind.String(), new.Size
		case new == nil:
			d.Change, d.Kind, d.OldSize = api.Removed, old.Kind.String(), old.Size
		default:
			if old.Kind == manifest.KindDir && new.Kind == manifest.KindDir {
				return nil
			}
			// A change of ctime alone is not one a user made (an import or
			// an extraction cannot keep ctime), nor is one of atime (a
			// read) or of birth time (an import sets it to its own time).
			o := *old
			o.CtimeNs, o.AtimeNs, o.BtimeNs = new.CtimeNs, new.AtimeNs, new.BtimeNs
			if reflect.DeepEqual(&o, new) {
				return nil
			}
			d.Change, d.Kind, d.OldSize, d.NewSize = api.Changed, new.Kind.String(), old.Size, new.Size
		}
		res.Entries = append(res.Entries, d)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// Export writes a snapshot as a tar stream.
func (s *Service) Export(ctx context.Context, spec string, w io.Writer) error {
	snap, id, err := s.cat.Resolve(ctx, spec)
	if err != nil {
		return err
	}
	if err := archive.Export(ctx, s.rec, snap.Root, w, nil); err != nil {
		return fmt.Errorf("export %s: %w", id[:12], err)
	}
	return nil
}

// Import creates session from a tar stream, atomically: the session exists
// only once every file is stored. Device nodes are refused unless devices.
func (s *Service) Import(ctx context.Context, session string, r io.Reader, devices bool) (*api.ImportResult, error) {
	if err := manifest.ValidateSessionName(session); err != nil {
		return nil, err
	}
	if _, err := s.cat.Head(ctx, session); err == nil {
		return nil, fmt.Errorf("import into %s: %w", session, catalog.ErrExists)
	} else if !errors.Is(err, catalog.ErrNoSession) {
		return nil, err
	}
	var res *archive.ImportResult
	err := s.eng.Guard(func() error {
		var err error
		if res, err = archive.Import(ctx, s.rec, r, archive.ImportOptions{Devices: devices, BtimeNs: time.Now().UnixNano()}); err != nil {
			return err
		}
		_, err = s.cat.CreateSessionAt(ctx, session, res.Root)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("import into %s: %w", session, err)
	}
	s.log.Info("imported", "session", session, "files", res.Files, "bytes", res.Bytes)
	return &api.ImportResult{Session: session, Root: res.Root, Files: res.Files, Dirs: res.Dirs, Symlinks: res.Symlinks, Special: res.Special, Bytes: res.Bytes}, nil
}

// GC collects unreachable chunks while sessions stay mounted.
func (s *Service) GC(ctx context.Context, progress func(api.Progress)) (*api.GCResult, error) {
	res, err := s.eng.GC(ctx, func(p fusefs.GCProgress) {
		if progress != nil {
			progress(api.Progress{Phase: string(p.Phase), Done: p.Done, Total: p.Total})
		}
	})
	s.metrics.gc(res, err)
	if err != nil {
		return nil, err
	}
	out := &api.GCResult{Scanned: res.Scanned, Reachable: res.Reachable, Freed: res.Freed,
		FreedBytes: res.FreedBytes, FreedStored: res.FreedStored, Duration: res.Duration}
	// Deleted chunks stay in the store's files until they are compacted:
	// compact whenever gc deleted something, so that forgotten data
	// leaves the disk.
	if c, ok := s.rt.Unwrap().(cas.Compactor); ok && res.Freed > 0 {
		if progress != nil {
			progress(api.Progress{Phase: "compact"})
		}
		cr, err := c.Compact(ctx)
		if err != nil {
			return out, fmt.Errorf("gc: freed %d chunks, but could not give their space back: %w", res.Freed, err)
		}
		out.ValueLogFiles = cr.LogFiles
		out.StoreBytesBefore, out.StoreBytesAfter = cr.BytesBefore, cr.BytesAfter
		s.log.Info("store compacted", "log_files", cr.LogFiles, "bytes_before", cr.BytesBefore, "bytes_after", cr.BytesAfter)
	}
	return out, nil
}

// Fsck verifies every reachable object, live sessions flushed first.
func (s *Service) Fsck(ctx context.Context, progress func(api.Progress)) (*fsck.Report, error) {
	if err := s.eng.SyncAll(ctx); err != nil {
		return nil, err
	}
	return fsck.Check(ctx, s.rec, s.cat, func(objects, bytes int64) {
		if progress != nil {
			progress(api.Progress{Phase: "check", Done: objects, Bytes: bytes})
		}
	})
}

// Stats measures the store, live sessions flushed first.
func (s *Service) Stats(ctx context.Context) (*fsck.Stats, error) {
	if err := s.eng.SyncAll(ctx); err != nil {
		return nil, err
	}
	return fsck.Measure(ctx, s.rec, s.cat)
}

// Close unmounts everything and flushes every session durably; the store
// stays open (its owner closes it). A mount that could not leave the mount
// table stays in the record, for the next start to detach.
func (s *Service) Close(ctx context.Context) error {
	s.endLife()
	waitGroup(ctx, &s.lostRuns)
	s.leases.close()
	err := s.eng.Close(ctx)
	left := make(map[string]bool)
	for _, m := range s.eng.Mounts() {
		left[m.Dir()] = true
	}
	s.mu.Lock()
	for dir := range s.mounts {
		if !left[dir] {
			delete(s.mounts, dir)
		}
	}
	if werr := s.saveMountsLocked(); werr != nil {
		err = errors.Join(err, werr)
	}
	s.mu.Unlock()
	return err
}

// waitGroup waits for wg, or until ctx ends.
func waitGroup(ctx context.Context, wg *sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}
