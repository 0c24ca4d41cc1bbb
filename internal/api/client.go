package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/homefs/homefs/internal/fsck"
	"github.com/homefs/homefs/internal/remote/remotetypes"
	"github.com/homefs/homefs/manifest"
)

// Client talks to a daemon over its socket.
type Client struct {
	socket string
}

// NewClient returns a client for the daemon listening on socket.
func NewClient(socket string) *Client {
	return &Client{socket: socket}
}

// Socket is the socket the client dials.
func (c *Client) Socket() string { return c.socket }

// dialError explains a failure to reach the daemon. A dial that the
// caller's context ended stays that context's error: the daemon may well
// be running (homefs export cancels its request when the local extract
// fails first, and then reports the extract's error).
func (c *Client) dialError(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("reach the homefs daemon at %s: %w", c.socket, err)
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ECONNREFUSED):
		return &Error{Code: CodeNotRunning, Message: fmt.Sprintf(
			"homefs daemon is not running (no socket at %s): start it with `homefs serve`", c.socket)}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &Error{Code: CodePermission, Message: fmt.Sprintf(
			"permission denied on %s: only the user who runs the homefs daemon may use it", c.socket)}
	}
	return &Error{Code: CodeNotRunning, Message: fmt.Sprintf("cannot reach the homefs daemon at %s: %v", c.socket, err)}
}

// do sends a request on a connection of its own (wire.go) and returns the
// answer, whose Body the caller closes; an answer of status 400 or more
// is returned as its error. Ending ctx closes the connection: the request
// and the body's reads fail with ctx's error.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body io.Reader, contentType string) (*response, error) {
	target := path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return nil, c.dialError(err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	resp, err := exchange(conn, method, target, contentType, body)
	if err != nil {
		stop()
		conn.Close()
		var be *bodyError
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.As(err, &be):
			return nil, fmt.Errorf("%s %s: %w", method, path, be.err)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
			// The daemon went away mid-request: say what that means.
			return nil, &Error{Code: CodeUnavailable, Message: fmt.Sprintf("homefs daemon at %s closed the connection before answering %s %s: it stopped or crashed (see its log); the operation may or may not have taken effect, so check (homefs log, session list) before retrying", c.socket, method, path)}
		}
		return nil, fmt.Errorf("homefs daemon at %s: %w", c.socket, err)
	}
	resp.Body = &connBody{r: resp.Body, ctx: ctx, conn: conn, stop: stop}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

// exchange writes the request on conn and reads the answer's head. A
// body of unknown length is written chunked by a goroutine of its own
// while the answer is read, which ends when the body does or conn
// closes.
func exchange(conn net.Conn, method, target, contentType string, body io.Reader) (*response, error) {
	w := bufio.NewWriter(conn)
	length := bodyLength(method, body)
	werr := writeRequestHead(w, method, target, contentType, length)
	var bodyErr chan error
	switch {
	case werr != nil:
	case length == -1:
		bodyErr = make(chan error, 1)
		go func() {
			err := writeChunked(w, body)
			bodyErr <- err // before the close, which the answer's read then meets
			var be *bodyError
			if errors.As(err, &be) {
				conn.Close() // abort: the daemon must not take a truncated body
			}
		}()
	case length > 0:
		if _, werr = io.Copy(w, body); werr == nil {
			werr = w.Flush()
		}
	}
	resp, err := readResponse(bufio.NewReaderSize(conn, bufferBytes))
	if err != nil {
		// Say why the daemon did not answer: the body failed, or the
		// daemon stopped reading.
		if bodyErr != nil {
			select {
			case berr := <-bodyErr:
				var be *bodyError
				if errors.As(berr, &be) {
					return nil, berr
				}
			default:
			}
		}
		if werr != nil && errors.Is(err, io.EOF) {
			return nil, werr
		}
		return nil, err
	}
	return resp, nil
}

// connBody is an answer's body: closing it closes the connection, and a
// read that fails because ctx ended returns ctx's error.
type connBody struct {
	r    io.Reader
	ctx  context.Context
	conn net.Conn
	stop func() bool
}

func (b *connBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF && b.ctx.Err() != nil {
		err = b.ctx.Err()
	}
	return n, err
}

func (b *connBody) Close() error {
	b.stop()
	return b.conn.Close()
}

func readError(resp *response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var e Error
	if json.Unmarshal(b, &e) == nil && e.Code != "" {
		return &e
	}
	return &Error{Code: CodeInternal, Message: fmt.Sprintf("daemon answered %s: %s", resp.Status, bytes.TrimSpace(b))}
}

// call sends in as JSON (when non-nil) and decodes the answer into out.
func (c *Client) call(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, method, path, query, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("homefs daemon: bad answer to %s: %w", path, err)
	}
	return nil
}

// streamCall runs a streamed operation, passing progress lines to
// progress and decoding the result into out.
func (c *Client) streamCall(ctx context.Context, path string, in any, progress func(Progress), out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, "POST", path, nil, body, ct)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		var line struct {
			Progress *Progress       `json:"progress"`
			Result   json.RawMessage `json:"result"`
			Error    *Error          `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("homefs daemon: bad stream line: %w", err)
		}
		switch {
		case line.Error != nil:
			return line.Error
		case line.Progress != nil:
			if progress != nil {
				progress(*line.Progress)
			}
		case line.Result != nil:
			return json.Unmarshal(line.Result, out)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("homefs daemon: %s: %w", path, err)
	}
	return &Error{Code: CodeInternal, Message: "homefs daemon: stream ended without a result (did the daemon stop?)"}
}

// Status asks the daemon how it is, without checking the remotes.
func (c *Client) Status(ctx context.Context) (*Status, error) {
	return c.StatusWith(ctx, StatusOptions{})
}

// StatusWith is Status with options (StatusOptions).
func (c *Client) StatusWith(ctx context.Context, opts StatusOptions) (*Status, error) {
	var q url.Values
	if opts.CheckRemotes {
		q = url.Values{"remotes": {"check"}}
	}
	var v Status
	return &v, c.call(ctx, "GET", PathStatus, q, nil, &v)
}

// Sessions lists the sessions.
func (c *Client) Sessions(ctx context.Context) ([]SessionInfo, error) {
	var v []SessionInfo
	return v, c.call(ctx, "GET", PathSessions, nil, nil, &v)
}

// CreateSession creates a session.
func (c *Client) CreateSession(ctx context.Context, req CreateSessionRequest) (*SessionInfo, error) {
	var v SessionInfo
	return &v, c.call(ctx, "POST", PathSessions, nil, req, &v)
}

// RemoveSession deletes a session; with purge, its snapshots too.
func (c *Client) RemoveSession(ctx context.Context, name string, purge bool) (*RemoveSessionResult, error) {
	var q url.Values
	if purge {
		q = url.Values{"purge": {"1"}}
	}
	var v RemoveSessionResult
	return &v, c.call(ctx, "DELETE", PathSessions+"/"+url.PathEscape(name), q, nil, &v)
}

// Forget forgets snapshots.
func (c *Client) Forget(ctx context.Context, req ForgetRequest) (*ForgetResult, error) {
	var v ForgetResult
	return &v, c.call(ctx, "POST", PathForget, nil, req, &v)
}

// Mount mounts a session or snapshot.
func (c *Client) Mount(ctx context.Context, req MountRequest) (*MountInfo, error) {
	var v MountInfo
	return &v, c.call(ctx, "POST", PathMounts, nil, req, &v)
}

// Mounts lists the mounts.
func (c *Client) Mounts(ctx context.Context) ([]MountInfo, error) {
	var v []MountInfo
	return v, c.call(ctx, "GET", PathMounts, nil, nil, &v)
}

// Unmount detaches a mount.
func (c *Client) Unmount(ctx context.Context, dir string) (*MountInfo, error) {
	var v MountInfo
	return &v, c.call(ctx, "POST", PathUnmount, nil, UnmountRequest{Dir: dir}, &v)
}

// Capture snapshots a session.
func (c *Client) Capture(ctx context.Context, session string, req CaptureRequest) (*SnapshotInfo, error) {
	var v SnapshotInfo
	return &v, c.call(ctx, "POST", PathSessions+"/"+url.PathEscape(session)+"/capture", nil, req, &v)
}

// Log returns a session's history.
func (c *Client) Log(ctx context.Context, session string) ([]SnapshotInfo, error) {
	var v []SnapshotInfo
	return v, c.call(ctx, "GET", PathSessions+"/"+url.PathEscape(session)+"/log", nil, nil, &v)
}

// Fork forks a session or snapshot.
func (c *Client) Fork(ctx context.Context, req ForkRequest) (*SessionInfo, error) {
	var v SessionInfo
	return &v, c.call(ctx, "POST", PathFork, nil, req, &v)
}

// Restore points a session at a snapshot.
func (c *Client) Restore(ctx context.Context, session, snapshot string) (*SessionInfo, error) {
	var out SessionInfo
	err := c.call(ctx, "POST", PathSessions+"/"+url.PathEscape(session)+"/restore", nil, RestoreRequest{Snapshot: snapshot}, &out)
	return &out, err
}

// SetLayout replaces a session's layout.
func (c *Client) SetLayout(ctx context.Context, session string, layout *manifest.Layout) (*SessionInfo, error) {
	var out SessionInfo
	err := c.call(ctx, "POST", PathSessions+"/"+url.PathEscape(session)+"/layout", nil, SetLayoutRequest{Layout: layout}, &out)
	return &out, err
}

// Diff compares two sessions or snapshots.
func (c *Client) Diff(ctx context.Context, a, b string) (*DiffResult, error) {
	var v DiffResult
	return &v, c.call(ctx, "GET", PathDiff, url.Values{"a": {a}, "b": {b}}, nil, &v)
}

// Export streams a snapshot as tar into w. An error after the stream began
// arrives in the trailer; w then holds a truncated archive.
func (c *Client) Export(ctx context.Context, snapshot string, w io.Writer) error {
	resp, err := c.do(ctx, "GET", PathExport, url.Values{"snapshot": {snapshot}}, nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("export %s: %w", snapshot, err)
	}
	if t := resp.Trailer.Get(ErrorTrailer); t != "" {
		var e Error
		if json.Unmarshal([]byte(t), &e) == nil && e.Code != "" {
			return &e
		}
		return &Error{Code: CodeInternal, Message: t}
	}
	return nil
}

// Import creates session from the tar stream r; device nodes in it are
// refused unless devices.
func (c *Client) Import(ctx context.Context, session string, r io.Reader, devices bool) (*ImportResult, error) {
	q := url.Values{"session": {session}}
	if devices {
		q.Set("devices", "1")
	}
	resp, err := c.do(ctx, "POST", PathImport, q, r, "application/x-tar")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var v ImportResult
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return nil, fmt.Errorf("homefs daemon: bad answer to import: %w", err)
	}
	return &v, nil
}

// GC collects garbage.
func (c *Client) GC(ctx context.Context, progress func(Progress)) (*GCResult, error) {
	var v GCResult
	return &v, c.streamCall(ctx, PathGC, nil, progress, &v)
}

// Fsck verifies the store.
func (c *Client) Fsck(ctx context.Context, progress func(Progress)) (*fsck.Report, error) {
	var v fsck.Report
	return &v, c.streamCall(ctx, PathFsck, nil, progress, &v)
}

// Stats measures the store.
func (c *Client) Stats(ctx context.Context) (*fsck.Stats, error) {
	var v fsck.Stats
	return &v, c.call(ctx, "GET", PathStats, nil, nil, &v)
}

// Bind binds a provider session from one session into another.
func (c *Client) Bind(ctx context.Context, req BindRequest) (*BindResult, error) {
	var v BindResult
	return &v, c.call(ctx, "POST", PathBind, nil, req, &v)
}

// ImportNative creates a session from a native snapshot.
func (c *Client) ImportNative(ctx context.Context, req ImportNativeRequest) (*ImportNativeResult, error) {
	var v ImportNativeResult
	return &v, c.call(ctx, "POST", PathImportNative, nil, req, &v)
}

// ExportNative writes a snapshot in the native format.
func (c *Client) ExportNative(ctx context.Context, req ExportNativeRequest) (*ExportNativeResult, error) {
	var v ExportNativeResult
	return &v, c.call(ctx, "POST", PathExportNative, nil, req, &v)
}

// AddRemote configures a remote.
func (c *Client) AddRemote(ctx context.Context, cfg remotetypes.Config) (*remotetypes.Config, error) {
	var v remotetypes.Config
	return &v, c.call(ctx, "POST", PathRemotes, nil, cfg, &v)
}

// Remotes lists the configured remotes.
func (c *Client) Remotes(ctx context.Context) ([]remotetypes.Config, error) {
	var v []remotetypes.Config
	return v, c.call(ctx, "GET", PathRemotes, nil, nil, &v)
}

// RemoveRemote forgets a remote.
func (c *Client) RemoveRemote(ctx context.Context, name string) error {
	return c.call(ctx, "DELETE", PathRemotes+"/"+url.PathEscape(name), nil, nil, nil)
}

// Push pushes a session or snapshot to a remote.
func (c *Client) Push(ctx context.Context, req PushRequest, progress func(Progress)) (*PushResult, error) {
	var v PushResult
	return &v, c.streamCall(ctx, PathPush, req, progress, &v)
}

// Pull brings a snapshot from a remote.
func (c *Client) Pull(ctx context.Context, req PullRequest, progress func(Progress)) (*PullResult, error) {
	var v PullResult
	return &v, c.streamCall(ctx, PathPull, req, progress, &v)
}

// RunHold is a run's hold on a whole-session mount (Client.RunMount).
type RunHold struct {
	RunMountInfo
	// Lost is closed if the daemon ends the hold before Release: it
	// stopped, or died, and no longer serves the mount.
	Lost <-chan struct{}
	// Release gives the hold back and waits (at most runReleaseWait) for
	// the daemon to unmount a mount made for the run and give back its
	// lease.
	Release func()
}

// runReleaseWait bounds Release's wait for the daemon: an unmount the
// kernel refuses is retried for up to about 10 s.
const runReleaseWait = 30 * time.Second

// RunMount holds a whole-session mount of session for homefs run until
// Release is called (or the process ends): the request's body stays open
// while the hold lasts, and the daemon gives the hold back when the body
// ends, answering then, or when the connection closes. With lease (a
// remote's name), the daemon takes the session's lease on that remote
// first and gives it back with the hold.
func (c *Client) RunMount(ctx context.Context, session, lease string) (*RunHold, error) {
	var q url.Values
	if lease != "" {
		q = url.Values{"lease": {lease}}
	}
	// The request's head goes at once; its chunked body stays open,
	// empty, until Release.
	hold, end := io.Pipe()
	resp, err := c.do(ctx, "POST", PathSessions+"/"+url.PathEscape(session)+"/run", q, hold, "application/octet-stream")
	if err != nil {
		end.Close()
		return nil, err
	}
	info, err := runAnswer(resp)
	if err != nil {
		end.Close()
		resp.Body.Close()
		return nil, err
	}
	lost, done := make(chan struct{}), make(chan struct{})
	var released atomic.Bool
	go func() {
		// The daemon writes nothing more: any end of the stream is the
		// end of the hold.
		_, _ = io.Copy(io.Discard, resp.Body)
		close(done)
		if !released.Load() {
			close(lost)
		}
	}()
	release := func() {
		if released.Swap(true) {
			return
		}
		end.Close()
		select {
		case <-done:
		case <-time.After(runReleaseWait):
		}
		resp.Body.Close()
	}
	return &RunHold{RunMountInfo: *info, Lost: lost, Release: release}, nil
}

// runAnswer reads the first line of the daemon's answer to a run.
func runAnswer(resp *response) (*RunMountInfo, error) {
	var line struct {
		Result *RunMountInfo `json:"result"`
		Error  *Error        `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&line); err != nil {
		return nil, fmt.Errorf("homefs daemon: bad answer to run: %w", err)
	}
	if line.Error != nil {
		return nil, line.Error
	}
	if line.Result == nil {
		return nil, fmt.Errorf("homefs daemon: empty answer to run")
	}
	return line.Result, nil
}

// AcquireLease takes a session's lease on a remote for the daemon.
func (c *Client) AcquireLease(ctx context.Context, req LeaseRequest) (*LeaseInfo, error) {
	var v LeaseInfo
	return &v, c.call(ctx, "POST", PathLeaseAcquire, nil, req, &v)
}

// ReleaseLease gives back the daemon's lease of a session on a remote.
func (c *Client) ReleaseLease(ctx context.Context, req LeaseRequest) (*LeaseInfo, error) {
	var v LeaseInfo
	return &v, c.call(ctx, "POST", PathLeaseRelease, nil, req, &v)
}

// Lease reads a session's lease on a remote.
func (c *Client) Lease(ctx context.Context, session, remoteName string) (*LeaseInfo, error) {
	var v LeaseInfo
	q := url.Values{"session": {session}}
	if remoteName != "" {
		q.Set("remote", remoteName)
	}
	return &v, c.call(ctx, "GET", PathLeases, q, nil, &v)
}

// RemoteFsck checks a remote.
func (c *Client) RemoteFsck(ctx context.Context, req RemoteFsckRequest, progress func(Progress)) (*remotetypes.FsckReport, error) {
	var v remotetypes.FsckReport
	return &v, c.streamCall(ctx, PathRemoteFsck, req, progress, &v)
}

// RemoteSessions lists a remote's sessions.
func (c *Client) RemoteSessions(ctx context.Context, name string) (*RemoteSessions, error) {
	var v RemoteSessions
	return &v, c.call(ctx, "POST", PathRemoteSessions, nil, RemoteRequest{Remote: name}, &v)
}

// RemoteForget forgets snapshots on a remote.
func (c *Client) RemoteForget(ctx context.Context, req RemoteForgetRequest) (*ForgetResult, error) {
	var v ForgetResult
	return &v, c.call(ctx, "POST", PathRemoteForget, nil, req, &v)
}

// RemotePurge removes a session from a remote.
func (c *Client) RemotePurge(ctx context.Context, req RemotePurgeRequest) (*RemoveSessionResult, error) {
	var v RemoveSessionResult
	return &v, c.call(ctx, "POST", PathRemotePurge, nil, req, &v)
}

// RemoteGC runs gc on a remote.
func (c *Client) RemoteGC(ctx context.Context, name string) (*remotetypes.GCResult, error) {
	var v remotetypes.GCResult
	return &v, c.call(ctx, "POST", PathRemoteGC, nil, RemoteRequest{Remote: name}, &v)
}
