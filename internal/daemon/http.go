package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
)

// streamLine is one line of a streamed response.
type streamLine struct {
	Progress *api.Progress `json:"progress,omitempty"`
	Result   any           `json:"result,omitempty"`
	Error    *api.Error    `json:"error,omitempty"`
}

// handler routes requests to the service.
func (s *Service) handler() http.Handler {
	mux := http.NewServeMux()
	s.remoteRoutes(mux)
	s.sessionRoutes(mux)
	s.mountRoutes(mux)
	s.snapshotRoutes(mux)
	s.storeRoutes(mux)
	s.nativeRoutes(mux)
	s.syncRoutes(mux)
	s.leaseRoutes(mux)
	return s.logRequests(mux)
}

// sessionRoutes: the daemon's status, and sessions: create, list, remove,
// capture, log, restore, run, layout.
func (s *Service) sessionRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+api.PathStatus, func(w http.ResponseWriter, r *http.Request) {
		opts := api.StatusOptions{CheckRemotes: r.URL.Query().Get("remotes") == "check"}
		reply(w, s.Status(r.Context(), opts), nil)
	})
	mux.HandleFunc("GET "+api.PathSessions, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Sessions(r.Context())
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathSessions, func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSessionRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.CreateSession(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("DELETE "+api.PathSessions+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.RemoveSession(r.Context(), r.PathValue("name"), r.URL.Query().Get("purge") == "1")
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathSessions+"/{name}/capture", func(w http.ResponseWriter, r *http.Request) {
		var req api.CaptureRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.Capture(r.Context(), r.PathValue("name"), req)
		reply(w, v, err)
	})
	mux.HandleFunc("GET "+api.PathSessions+"/{name}/log", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Log(r.Context(), r.PathValue("name"))
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathSessions+"/{name}/restore", func(w http.ResponseWriter, r *http.Request) {
		var req api.RestoreRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.Restore(r.Context(), r.PathValue("name"), req)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathSessions+"/{name}/run", func(w http.ResponseWriter, r *http.Request) {
		// The run holds its mount for as long as this request is open:
		// until its body ends (homefs run gives the hold back, and the
		// answer ends once the mount and lease are given back) or its
		// connection closes (homefs run died). The body is read while the
		// answer streams.
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			// Without it the server would wait for the body's end
			// before answering: the run would never start.
			reply(w, nil, fmt.Errorf("run: %w", err))
			return
		}
		info, release, err := s.RunMount(r.Context(), r.PathValue("name"), r.URL.Query().Get("lease"))
		if err != nil {
			reply(w, nil, err)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		_ = json.NewEncoder(w).Encode(streamLine{Result: info})
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		ended := make(chan struct{})
		go func() {
			_, _ = io.Copy(io.Discard, r.Body)
			close(ended)
		}()
		select {
		case <-ended:
			release()
		case <-r.Context().Done():
			// homefs run died, or the daemon stops: the answer ends
			// first, so that a run still going learns that its hold is
			// lost and ends its command, which keeps the mount busy.
			s.lostRuns.Add(1)
			go func() {
				defer s.lostRuns.Done()
				release()
			}()
		}
	})
	mux.HandleFunc("POST "+api.PathSessions+"/{name}/layout", func(w http.ResponseWriter, r *http.Request) {
		var req api.SetLayoutRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.SetLayout(r.Context(), r.PathValue("name"), req)
		reply(w, v, err)
	})
}

// mountRoutes: mount, unmount, forget.
func (s *Service) mountRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+api.PathMounts, func(w http.ResponseWriter, r *http.Request) {
		reply(w, s.Mounts(r.Context()), nil)
	})
	mux.HandleFunc("POST "+api.PathMounts, func(w http.ResponseWriter, r *http.Request) {
		var req api.MountRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.Mount(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathUnmount, func(w http.ResponseWriter, r *http.Request) {
		var req api.UnmountRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.Unmount(r.Context(), req.Dir)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathForget, func(w http.ResponseWriter, r *http.Request) {
		var req api.ForgetRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.Forget(r.Context(), req)
		reply(w, v, err)
	})
}

// snapshotRoutes: fork, diff, export, import.
func (s *Service) snapshotRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+api.PathFork, func(w http.ResponseWriter, r *http.Request) {
		var req api.ForkRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.Fork(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("GET "+api.PathDiff, func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		v, err := s.Diff(r.Context(), q.Get("a"), q.Get("b"))
		reply(w, v, err)
	})
	mux.HandleFunc("GET "+api.PathExport, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", api.ErrorTrailer)
		w.Header().Set("Content-Type", "application/x-tar")
		sw := &startWriter{w: w}
		err := s.Export(r.Context(), r.URL.Query().Get("snapshot"), sw)
		if err == nil {
			return
		}
		if !sw.started {
			// Nothing sent yet: a plain error response.
			w.Header().Del("Trailer")
			reply(w, nil, err)
			return
		}
		b, _ := json.Marshal(toError(err))
		w.Header().Set(api.ErrorTrailer, string(b))
	})
	mux.HandleFunc("POST "+api.PathImport, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Import(r.Context(), r.URL.Query().Get("session"), r.Body, r.URL.Query().Get("devices") == "1")
		reply(w, v, err)
	})
}

// storeRoutes: gc, fsck, stats.
func (s *Service) storeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+api.PathGC, func(w http.ResponseWriter, r *http.Request) {
		stream(w, func(progress func(api.Progress)) (any, error) { return s.GC(r.Context(), progress) })
	})
	mux.HandleFunc("POST "+api.PathFsck, func(w http.ResponseWriter, r *http.Request) {
		stream(w, func(progress func(api.Progress)) (any, error) { return s.Fsck(r.Context(), progress) })
	})
	mux.HandleFunc("GET "+api.PathStats, func(w http.ResponseWriter, r *http.Request) {
		v, err := s.Stats(r.Context())
		reply(w, v, err)
	})
}

// nativeRoutes: bind, and import and export of a provider's native home.
func (s *Service) nativeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST "+api.PathBind, func(w http.ResponseWriter, r *http.Request) {
		var req api.BindRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.Bind(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathImportNative, func(w http.ResponseWriter, r *http.Request) {
		var req api.ImportNativeRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.ImportNative(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("POST "+api.PathExportNative, func(w http.ResponseWriter, r *http.Request) {
		var req api.ExportNativeRequest
		if !decode(w, r, &req) {
			return
		}
		v, err := s.ExportNative(r.Context(), req)
		reply(w, v, err)
	})
}

// syncRoutes: remotes, push, pull.
func (s *Service) syncRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+api.PathRemotes, func(w http.ResponseWriter, r *http.Request) {
		reply(w, s.Remotes(r.Context()), nil)
	})
	mux.HandleFunc("POST "+api.PathRemotes, func(w http.ResponseWriter, r *http.Request) {
		var req remote.Config
		if !decode(w, r, &req) {
			return
		}
		v, err := s.AddRemote(r.Context(), req)
		reply(w, v, err)
	})
	mux.HandleFunc("DELETE "+api.PathRemotes+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		err := s.RemoveRemote(r.Context(), r.PathValue("name"))
		reply(w, struct{}{}, err)
	})
	mux.HandleFunc("POST "+api.PathPush, func(w http.ResponseWriter, r *http.Request) {
		var req api.PushRequest
		if !decode(w, r, &req) {
			return
		}
		stream(w, func(progress func(api.Progress)) (any, error) { return s.Push(r.Context(), req, progress) })
	})
	mux.HandleFunc("POST "+api.PathPull, func(w http.ResponseWriter, r *http.Request) {
		var req api.PullRequest
		if !decode(w, r, &req) {
			return
		}
		stream(w, func(progress func(api.Progress)) (any, error) { return s.Pull(r.Context(), req, progress) })
	})
}

// logRequests logs each request with its outcome at debug level, and
// failures at info.
func (s *Service) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: 200}
		next.ServeHTTP(sw, r)
		if sw.status >= 400 {
			s.log.Info("request failed", "method", r.Method, "path", r.URL.Path, "status", sw.status)
		} else {
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "status", sw.status)
		}
	})
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets an http.ResponseController reach the server's writer (the
// run's full duplex).
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// startWriter notes whether any byte was written.
type startWriter struct {
	w       io.Writer
	started bool
}

func (w *startWriter) Write(p []byte) (int, error) {
	w.started = true
	return w.w.Write(p)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, &api.Error{Code: api.CodeUsage, Message: fmt.Sprintf("bad request body: %v", err)})
		return false
	}
	return true
}

func reply(w http.ResponseWriter, v any, err error) {
	if err != nil {
		writeError(w, toError(err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus(e.Code))
	_ = json.NewEncoder(w).Encode(e)
}

// stream runs fn, sending its progress as NDJSON lines, then its result
// or error as the last line.
func stream(w http.ResponseWriter, fn func(progress func(api.Progress)) (any, error)) {
	w.Header().Set("Content-Type", "application/x-ndjson")
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	flush := func() {
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	progress := func(p api.Progress) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(streamLine{Progress: &p})
		flush()
	}
	v, err := fn(progress)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		_ = enc.Encode(streamLine{Error: toError(err)})
	} else {
		_ = enc.Encode(streamLine{Result: v})
	}
	flush()
}

// errPeer is returned to a caller whose uid is not the daemon's.
func errPeer(uid, owner int) *api.Error {
	return &api.Error{Code: api.CodePermission, Message: fmt.Sprintf(
		"permission denied: uid %d may not use this homefs daemon, which belongs to uid %d", uid, owner)}
}

var errNoCred = errors.New("no peer credentials")

type peerKey struct{}

// checkPeer refuses requests from other uids than owner.
func checkPeer(owner int, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		uid, ok := r.Context().Value(peerKey{}).(int)
		if !ok {
			writeError(w, &api.Error{Code: api.CodePermission, Message: errNoCred.Error()})
			return
		}
		if uid != owner {
			writeError(w, errPeer(uid, owner))
			return
		}
		next.ServeHTTP(w, r)
	})
}
