package daemon

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/homefs/homefs/internal/remote"
)

// pathRemoteFsck reads back what a remote's heads reach.
const pathRemoteFsck = "/v1/remote/fsck"

// RemoteFsckRequest checks a remote ("" for the only one): every head, or
// only Session's.
type RemoteFsckRequest struct {
	Remote  string `json:"remote,omitempty"`
	Session string `json:"session,omitempty"`
}

// RemoteFsck reads back every record, node and chunk that the remote's
// heads (or one session's head) reach, checking each as a pull does, and
// reports what is missing or damaged there (remote.Fsck).
func (s *Service) RemoteFsck(ctx context.Context, req RemoteFsckRequest, progress func(Progress)) (*remote.FsckReport, error) {
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
	mux.HandleFunc("POST "+pathRemoteFsck, func(w http.ResponseWriter, r *http.Request) {
		var req RemoteFsckRequest
		if !decode(w, r, &req) {
			return
		}
		stream(w, func(progress func(Progress)) (any, error) { return s.RemoteFsck(r.Context(), req, progress) })
	})
}

// RemoteFsck checks a remote.
func (c *Client) RemoteFsck(ctx context.Context, req RemoteFsckRequest, progress func(Progress)) (*remote.FsckReport, error) {
	var v remote.FsckReport
	return &v, c.streamCall(ctx, pathRemoteFsck, req, progress, &v)
}
