package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// Bind binds a provider session (and, for Codex, the chain it was forked
// from) from one session into another by reference. It runs under the
// engine's Guard: it places entries naming chunks that only the target's
// tree will name once flushed.
func (s *Service) Bind(ctx context.Context, req api.BindRequest) (*api.BindResult, error) {
	p, err := fork.Lookup(req.Provider)
	if err != nil {
		return nil, err
	}
	res := &api.BindResult{Source: req.Source, Target: req.Target}
	env := fork.WithStore(s.eng, s.rec)
	err = s.eng.Guard(func() error {
		src, err := s.homeOf(ctx, req.Source, p.Name)
		if err != nil {
			return err
		}
		tgt, err := s.homeOf(ctx, req.Target, p.Name)
		if err != nil {
			return err
		}
		if err := checkKeyedBind(p, req, src, tgt); err != nil {
			return err
		}
		if tgt.home == "" {
			// The target has no home of the provider yet: the same path.
			tgt.home = src.home
		}
		res.BindResult, err = fork.Bind(ctx, env, fork.BindRequest{
			Provider: req.Provider, ID: req.ID, Source: req.Source, Target: req.Target,
			SourceHome: src.home, TargetHome: tgt.home,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("bound", "provider", req.Provider, "id", res.Handle.ID, "source", req.Source, "target", req.Target, "rollouts", len(res.Rollouts))
	return res, nil
}

// ImportNative creates a session from a native snapshot, atomically: every
// blob is checked before anything is stored, and the session (with the
// snapshot's handles) exists only once its whole tree does.
func (s *Service) ImportNative(ctx context.Context, req api.ImportNativeRequest) (*api.ImportNativeResult, error) {
	if err := manifest.ValidateSessionName(req.Session); err != nil {
		return nil, err
	}
	file, err := s.outsideMounts(req.File, "native snapshot")
	if err != nil {
		return nil, err
	}
	blobDir, err := s.outsideMounts(req.BlobDir, "blob directory")
	if err != nil {
		return nil, err
	}
	if _, err := s.cat.Head(ctx, req.Session); err == nil {
		return nil, fmt.Errorf("import into %s: %w", req.Session, catalog.ErrExists)
	} else if !errors.Is(err, catalog.ErrNoSession) {
		return nil, err
	}
	js, err := readLimited(file, fork.MaxNativeSize)
	if err != nil {
		return nil, fmt.Errorf("import-native into %s: %w", req.Session, err)
	}
	// Decoded here too, for the file count: ImportNative decodes it again.
	snap, err := fork.DecodeNative(js)
	if err != nil {
		return nil, fmt.Errorf("import-native %s: %w", file, err)
	}
	res := &api.ImportNativeResult{Session: req.Session, Files: len(snap.Files)}
	err = s.eng.Guard(func() error {
		root, handles, err := fork.ImportNative(ctx, s.rec, js, blobDir)
		if err != nil {
			return err
		}
		res.Root, res.Handles = root, handles
		_, err = s.cat.CreateSessionAtHandles(ctx, req.Session, root, handles)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("import-native into %s: %w", req.Session, err)
	}
	s.log.Info("imported native snapshot", "session", req.Session, "files", res.Files)
	return res, nil
}

// readLimited reads a regular file of at most limit bytes.
func readLimited(name string, limit int64) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes: %w", name, limit, fork.ErrTooLarge)
	}
	return b, nil
}

// ExportNative writes a snapshot in the native format into a missing or
// empty directory, and reports what the format could not hold.
func (s *Service) ExportNative(ctx context.Context, req api.ExportNativeRequest) (*api.ExportNativeResult, error) {
	dir, err := s.outsideMounts(req.Dir, "export directory")
	if err != nil {
		return nil, err
	}
	snap, id, err := s.cat.Resolve(ctx, req.Snapshot)
	if err != nil {
		return nil, err
	}
	if ents, err := os.ReadDir(dir); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("export-native into %s: %w: the directory is not empty", dir, os.ErrExist)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	leftOut, err := fork.ExportNative(ctx, s.rec, snap.Root, snap.Handles, dir)
	if err != nil {
		return nil, fmt.Errorf("export-native %s: %w", id[:12], err)
	}
	if leftOut == nil {
		leftOut = []string{}
	}
	s.log.Info("exported native snapshot", "snapshot", id, "dir", dir, "left_out", len(leftOut))
	return &api.ExportNativeResult{Snapshot: id, Dir: dir, Manifest: filepath.Join(dir, fork.NativeManifestName), LeftOut: leftOut}, nil
}

// outsideMounts checks that p, an absolute path the daemon is to read or
// write itself, lies outside every mount it serves and outside its root:
// a daemon doing I/O on its own mount can deadlock in the kernel. It
// returns p cleaned, with the symlinks of its existing part resolved.
func (s *Service) outsideMounts(p, what string) (string, error) {
	if p == "" || !filepath.IsAbs(p) {
		return "", usagef("%s %q: want an absolute path", what, p)
	}
	p = filepath.Clean(p)
	if err := s.checkOutside(p, what); err != nil {
		return "", err
	}
	// Resolve what exists (the last element may not yet), then check again.
	dir, base := p, ""
	for {
		real, err := filepath.EvalSymlinks(dir)
		if err == nil {
			p = filepath.Join(real, base)
			break
		}
		if !errors.Is(err, os.ErrNotExist) || filepath.Dir(dir) == dir {
			return "", fmt.Errorf("%s %s: %w", what, p, err)
		}
		dir, base = filepath.Dir(dir), filepath.Join(filepath.Base(dir), base)
	}
	return p, s.checkOutside(p, what)
}

func (s *Service) checkOutside(p, what string) error {
	within := func(p, dir string) bool {
		return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
	}
	if within(p, s.root) {
		return usagef("%s %s is inside the daemon's root %s", what, p, s.root)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for dir := range s.mounts {
		if within(p, dir) {
			return usagef("%s %s is inside the homefs mount %s: the daemon does not read or write its own mounts (use a directory outside it)", what, p, dir)
		}
	}
	return nil
}

// sessionHome is where a provider's home lies in a session.
type sessionHome struct {
	home      string // for fork.BindRequest: "." for the root, "" if none
	workspace string // the session's canonical workspace path, "" if none
}

// homeOf finds provider's home in session: where the layout records it,
// else by content (fork.HomeFinder.Homes).
func (s *Service) homeOf(ctx context.Context, session, provider string) (sessionHome, error) {
	h, err := s.cat.Head(ctx, session)
	if err != nil {
		return sessionHome{}, err
	}
	var out sessionHome
	if w := h.Layout; w != nil && w.Workspace != nil {
		out.workspace = w.Workspace.At
	}
	root, err := s.eng.Root(ctx, session)
	if err != nil {
		return out, err
	}
	homes, err := s.homes.Homes(ctx, s.rec, root, h.Layout)
	if err != nil {
		return out, err
	}
	for _, p := range homes {
		if p.Provider == provider {
			out.home = p.Subtree
			if out.home == "" {
				out.home = "."
			}
			break
		}
	}
	return out, nil
}

// checkKeyedBind refuses to bind a provider that keys its sessions on the
// absolute workspace path (Claude Code, Pi) between sessions whose
// canonical workspace paths differ: the bound session could not be
// resumed in the target, or would act on the source's workspace.
func checkKeyedBind(p fork.Provider, req api.BindRequest, src, tgt sessionHome) error {
	if p.KeysOn == "" || src.workspace != "" && src.workspace == tgt.workspace {
		return nil
	}
	where := func(w string) string {
		if w == "" {
			return "none"
		}
		return w
	}
	return usagef("%s keys its sessions on the %s: %s's canonical workspace path is %s, %s's is %s; record the same one in both (homefs session set %s --workspace-at PATH) and resume through homefs run",
		p.Name, p.KeysOn, req.Source, where(src.workspace), req.Target, where(tgt.workspace), req.Target)
}

// dropDerived removes the providers' derived state from session, a session
// just made from another session's tree (fork, create --from, restore of
// a snapshot from outside its history), wherever its homes lie, and
// records in info what it removed and what it left with a warning.
// Codex's state_5.sqlite records the absolute paths of rollouts: mounted
// elsewhere, Codex would follow them back into the source's files.
// Without it Codex rebuilds its state from sessions/. The cost is the
// paths removed and a few tree nodes, not the session's size.
func (s *Service) dropDerived(ctx context.Context, session string, info *api.SessionInfo) error {
	var res fork.DerivedResult
	err := s.eng.Guard(func() error {
		var err error
		res, err = s.homes.DropDerived(ctx, fork.WithStore(s.eng, s.rec), session, info.Layout)
		return err
	})
	if err != nil {
		return fmt.Errorf("session %s: %w", session, err)
	}
	info.DroppedDerived, info.Warnings = res.Removed, res.Warnings
	if len(res.Removed) > 0 {
		s.log.Info("dropped derived state", "session", session, "paths", res.Removed)
	}
	for _, w := range res.Warnings {
		s.log.Warn("provider state keyed on absolute paths", "session", session, "warning", w)
	}
	return nil
}
