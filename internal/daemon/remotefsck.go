package daemon

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
)

// RemoteFsck reads back every record, node and chunk that the remote's
// heads (or one session's head) reach, checking each as a pull does, and
// reports what is missing or damaged there (remote.Fsck).
func (s *Service) RemoteFsck(ctx context.Context, req api.RemoteFsckRequest, progress func(api.Progress)) (*remote.FsckReport, error) {
	r, err := s.openRemote(ctx, req.Remote)
	if err != nil {
		return nil, err
	}
	rep, err := remote.Fsck(ctx, r, remote.FsckOptions{Session: req.Session, Progress: remoteProgress(progress)})
	if err != nil {
		return nil, err
	}
	level := slog.LevelInfo
	if len(rep.Problems) > 0 {
		level = slog.LevelWarn
	}
	s.log.Log(ctx, level, "remote fsck", "remote", r.Name(), "session", req.Session, "snapshots", rep.Snapshots, "objects", rep.Objects, "problems", len(rep.Problems))
	return rep, nil
}

func (s *Service) remoteFsckRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+api.PathRemoteFsck, func(w http.ResponseWriter, r *http.Request) {
		var req api.RemoteFsckRequest
		if !decode(w, r, &req) {
			return
		}
		stream(w, func(progress func(api.Progress)) (any, error) { return s.RemoteFsck(r.Context(), req, progress) })
	})
}
