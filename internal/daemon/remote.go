package daemon

import (
	"context"
	"fmt"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
)

// AddRemote configures a remote. The daemon checks the config and that
// its own environment or credentials file holds keys, and reads an
// encrypted remote's key and checks it against the remote; the keys are
// never stored nor returned.
func (s *Service) AddRemote(ctx context.Context, cfg remote.Config) (*remote.Config, error) {
	if err := cfg.Validate(); err != nil {
		return nil, usagef("%v", err)
	}
	if err := s.remotes.Add(ctx, cfg); err != nil {
		return nil, err
	}
	s.log.Info("remote added", "remote", cfg.Name, "url", cfg.URL, "endpoint", cfg.Endpoint, "encryption", cfg.Encryption.String())
	return &cfg, nil
}

// Remotes lists the configured remotes.
func (s *Service) Remotes(ctx context.Context) []remote.Config {
	l := s.remotes.Registry().List()
	if l == nil {
		l = []remote.Config{}
	}
	return l
}

// RemoveRemote forgets a remote; nothing on it is touched.
func (s *Service) RemoveRemote(ctx context.Context, name string) error {
	if err := s.remotes.Remove(name); err != nil {
		return err
	}
	s.log.Info("remote removed", "remote", name)
	return nil
}

// remoteName resolves "" to the only configured remote.
func (s *Service) remoteName(name string) (string, error) {
	cfg, err := s.remotes.Registry().Get(name)
	return cfg.Name, err
}

// Push makes a snapshot (or a session's latest) durable on a remote and
// moves its session's remote head. It returns once the snapshot record is
// written: the durability barrier.
func (s *Service) Push(ctx context.Context, req api.PushRequest, progress func(api.Progress)) (*api.PushResult, error) {
	name, err := s.remoteName(req.Remote)
	if err != nil {
		return nil, err
	}
	res, err := s.remotes.Push(ctx, s.rec, s.cat, req.Spec, name, remote.PushOptions{Progress: remoteProgress(progress), Repair: req.Repair})
	if err != nil {
		s.metrics.push(name, 0, 0, err)
		return nil, err
	}
	s.metrics.push(name, res.Uploaded, res.UploadedBytes, nil)
	s.log.Info("pushed", "remote", name, "snapshot", res.ID, "session", res.Session, "uploaded", res.Uploaded, "bytes", res.UploadedBytes, "head_moved", res.HeadMoved)
	if req.Repair {
		s.log.Info("repaired", "remote", name, "snapshot", res.ID, "verified", res.Verified, "missing", res.Missing, "damaged", res.Damaged)
	}
	return &api.PushResult{
		Remote: name, Snapshot: res.ID, Session: res.Session, Records: res.Records,
		Checked: res.Checked, Uploaded: res.Uploaded, UploadedBytes: res.UploadedBytes, HeadMoved: res.HeadMoved,
		Repair: req.Repair, Verified: res.Verified, Missing: res.Missing, Damaged: res.Damaged,
	}, nil
}

// Pull brings a snapshot's record and tree (and with All its chunks) from
// a remote and registers it with its lineage. It runs under the engine's
// Guard: it stores nodes before the catalog names them.
func (s *Service) Pull(ctx context.Context, req api.PullRequest, progress func(api.Progress)) (*api.PullResult, error) {
	name, err := s.remoteName(req.Remote)
	if err != nil {
		return nil, err
	}
	var res *remote.PullResult
	err = s.eng.Guard(func() error {
		var err error
		res, err = s.remotes.Pull(ctx, s.rec, s.cat, req.Spec, name, remote.PullOptions{All: req.All, Progress: remoteProgress(progress)})
		return err
	})
	if err != nil {
		s.metrics.pull(name, 0, 0, err)
		return nil, err
	}
	s.metrics.pull(name, res.Fetched, res.FetchedBytes, nil)
	s.log.Info("pulled", "remote", name, "snapshot", res.ID, "records", res.Records, "fetched", res.Fetched, "all", req.All)
	return &api.PullResult{
		Remote: name, Snapshot: res.ID, Session: res.Snapshot.Session, Records: res.Records,
		Nodes: res.Nodes, Fetched: res.Fetched, FetchedBytes: res.FetchedBytes, All: req.All,
	}, nil
}

func remoteProgress(progress func(api.Progress)) func(remote.Progress) {
	if progress == nil {
		return nil
	}
	return func(p remote.Progress) {
		progress(api.Progress{Phase: string(p.Phase), Done: p.ObjectsDone, Total: p.Objects, Bytes: p.BytesDone, BytesTotal: p.Bytes})
	}
}

// pullForMount pulls what a mount --remote shows, lazily, and returns the
// snapshot id.
func (s *Service) pullForMount(ctx context.Context, req api.MountRequest) (id, session, name string, err error) {
	spec := req.Session
	if req.Snapshot != "" {
		spec = req.Snapshot
	}
	res, err := s.Pull(ctx, api.PullRequest{Spec: spec, Remote: req.Remote}, nil)
	if err != nil {
		return "", "", "", fmt.Errorf("mount --remote: %w", err)
	}
	return res.Snapshot, res.Session, res.Remote, nil
}
