package daemon

import (
	"context"
	"net/http"
	"time"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
)

// RemoteSessions lists the sessions on a remote.
func (s *Service) RemoteSessions(ctx context.Context, req api.RemoteRequest) (*api.RemoteSessions, error) {
	r, err := s.openRemote(ctx, req.Remote)
	if err != nil {
		return nil, err
	}
	list, err := r.Sessions(ctx)
	if err != nil {
		return nil, err
	}
	return &api.RemoteSessions{Remote: r.Name(), Sessions: list}, nil
}

// RemoteForget forgets snapshot records on a remote: named ones, or those
// of a session that a policy does not keep. A session's remote head is
// never forgotten.
func (s *Service) RemoteForget(ctx context.Context, req api.RemoteForgetRequest) (*api.ForgetResult, error) {
	r, err := s.openRemote(ctx, req.Remote)
	if err != nil {
		return nil, err
	}
	res := &api.ForgetResult{DryRun: req.DryRun, Forgotten: []string{}}
	switch {
	case len(req.Snapshots) > 0 && req.Session != "":
		return nil, usagef("name snapshots or give --session with a policy, not both")
	case len(req.Snapshots) > 0:
		ids, err := r.Forget(ctx, req.Snapshots, req.DryRun)
		if err != nil {
			return nil, err
		}
		res.Forgotten = append(res.Forgotten, ids...)
	case req.Session != "":
		ds, err := r.ForgetPolicy(ctx, req.Session, req.Policy, time.Local, req.DryRun)
		if err != nil {
			return nil, err
		}
		res.Policy, res.Decisions = req.Policy.String(), ds
		for _, d := range ds {
			if !d.Keep {
				res.Forgotten = append(res.Forgotten, d.ID)
			}
		}
	default:
		return nil, usagef("name snapshots, or give a session and a policy")
	}
	s.log.Info("forgot on remote", "remote", r.Name(), "snapshots", len(res.Forgotten), "dry_run", req.DryRun)
	return res, nil
}

// RemotePurge deletes a session's head and every record of it from a
// remote; remote gc then deletes what only they reached.
func (s *Service) RemotePurge(ctx context.Context, req api.RemotePurgeRequest) (*api.RemoveSessionResult, error) {
	r, err := s.openRemote(ctx, req.Remote)
	if err != nil {
		return nil, err
	}
	ids, err := r.Purge(ctx, req.Session)
	if err != nil {
		return nil, err
	}
	s.log.Info("purged on remote", "remote", r.Name(), "session", req.Session, "snapshots", len(ids))
	return &api.RemoveSessionResult{Forgotten: ids}, nil
}

// RemoteGC deletes what no head on a remote reaches (remote.GC: safe while
// other hosts push).
func (s *Service) RemoteGC(ctx context.Context, req api.RemoteRequest) (*remote.GCResult, error) {
	r, err := s.openRemote(ctx, req.Remote)
	if err != nil {
		return nil, err
	}
	res, err := remote.GC(ctx, r)
	if err != nil {
		return nil, err
	}
	s.log.Info("remote gc", "remote", r.Name(), "deleted_records", res.DeletedRecords, "deleted_chunks", res.DeletedChunks, "deleted_bytes", res.DeletedBytes)
	return res, nil
}

func (s *Service) openRemote(ctx context.Context, name string) (*remote.Remote, error) {
	name, err := s.remoteName(name)
	if err != nil {
		return nil, err
	}
	return s.remotes.Remote(ctx, name)
}

// remoteRoutes adds the endpoints above, and remote fsck's, to mux.
func (s *Service) remoteRoutes(mux *http.ServeMux) {
	s.remoteFsckRoutes(mux)
	mux.HandleFunc("POST "+api.PathRemoteSessions, func(w http.ResponseWriter, r *http.Request) {
		var req api.RemoteRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.RemoteSessions(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathRemoteForget, func(w http.ResponseWriter, r *http.Request) {
		var req api.RemoteForgetRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.RemoteForget(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathRemotePurge, func(w http.ResponseWriter, r *http.Request) {
		var req api.RemotePurgeRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.RemotePurge(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathRemoteGC, func(w http.ResponseWriter, r *http.Request) {
		var req api.RemoteRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.RemoteGC(r.Context(), req)
		reply(w, v, err)
	})
}
