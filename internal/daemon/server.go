package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
	"github.com/homefs/homefs/internal/sdnotify"
)

// Config configures Serve.
type Config struct {
	Root   string // the state directory; created 0700 if missing
	Socket string // "" means DefaultSocket(Root)
	Logger *slog.Logger
	// Badger tunes the store.
	Badger badgerstore.Options
	// URing says whether mounts are served through FUSE over io_uring,
	// and whether the daemon may turn the host's switch on for it
	// (fusefs.URingMode; the zero value is /dev/fuse only).
	URing fusefs.URingMode
	// ShutdownGrace is how long open files of a busy mount are served at
	// shutdown, after the mount left the mount table (fusefs.Options).
	ShutdownGrace time.Duration
	// Ready, when set, is called once the socket accepts requests.
	Ready func()
	// Notify, when set, is the service manager (systemd, Type=notify) to
	// tell READY=1 once the socket accepts requests, STOPPING=1 when
	// shutdown begins, and, with a watchdog, WATCHDOG=1 while the store
	// answers.
	Notify *sdnotify.Notifier
	// Metrics, when set, is where Prometheus metrics are served at
	// /metrics: a loopback host:port or unix:/path (ParseMetricsAddr).
	Metrics string
	// RemoteTimeouts bound every request to a remote (the zero value:
	// remote's defaults).
	RemoteTimeouts remote.Timeouts
}

// ErrAlreadyRunning is returned when another daemon holds the root or the
// socket.
var ErrAlreadyRunning = errors.New("another homefs daemon is running")

// Serve runs the daemon until ctx ends, then unmounts every mount (a busy
// one is detached, its open files served for the grace period, then its
// connection ended), flushes every session, closes the store and removes
// the socket.
func Serve(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	root, sock, err := servePaths(cfg)
	if err != nil {
		return err
	}
	var m *metrics
	if cfg.Metrics != "" {
		if _, _, err := ParseMetricsAddr(cfg.Metrics); err != nil {
			return err
		}
		m = newMetrics()
	}
	store, err := openStore(root, cfg.Badger, log)
	if err != nil {
		return err
	}
	closeStore := store.Close
	defer func() {
		if err := closeStore(); err != nil {
			log.Error("close store", "err", err)
		}
	}()
	reportStaleMounts(root, log)

	svc, err := newService(ctx, root, store, log, cfg.URing, cfg.ShutdownGrace, m, cfg.RemoteTimeouts, cfg.Badger.Salvage)
	if err != nil {
		return err
	}
	closeStore = svc.CloseStore
	svc.socket = sock
	if m != nil {
		stopMetrics, err := serveMetrics(ctx, svc, cfg.Metrics, log)
		if err != nil {
			return errors.Join(err, svc.Close(context.Background()))
		}
		defer stopMetrics()
	}
	if err := writeMounts(root, nil); err != nil {
		return fmt.Errorf("record mounts: %w", err)
	}

	ln, err := listen(sock)
	if err != nil {
		return err
	}
	srv := newHTTPServer(ctx, svc, log)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	uh := svc.eng.URingHost()
	log.Info("homefs daemon ready", "root", root, "socket", sock, "pid", os.Getpid(),
		"fuse_uring", uh.Mode, "uring_switch", uh.Switch, "uring_switch_changed", uh.Changed)
	if cfg.Ready != nil {
		cfg.Ready()
	}
	stopWatchdog := notifyReady(ctx, cfg.Notify, store, root, log)
	defer stopWatchdog()

	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "cause", context.Cause(ctx))
	case serveErr = <-errc:
		log.Error("server stopped", "err", serveErr)
	}
	return shutdown(cfg, srv, sock, svc, store, serveErr, log)
}

// servePaths returns the absolute paths of the root, created 0700 if
// missing, and of the socket.
func servePaths(cfg Config) (root, sock string, err error) {
	root, err = filepath.Abs(cfg.Root)
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", "", fmt.Errorf("create root %s: %w", root, err)
	}
	sock = cfg.Socket
	if sock == "" {
		sock = api.DefaultSocket(root)
	}
	if sock, err = filepath.Abs(sock); err != nil {
		return "", "", err
	}
	return root, sock, nil
}

// openStore opens the root's Badger store; a store another process holds
// is ErrAlreadyRunning.
func openStore(root string, bopts badgerstore.Options, log *slog.Logger) (*badgerstore.Store, error) {
	storeDir := filepath.Join(root, "store")
	if bopts.Logger == nil {
		bopts.Logger = log.With("component", "badger")
	}
	store, err := badgerstore.Open(storeDir, bopts)
	if errors.Is(err, badgerstore.ErrLocked) {
		return nil, fmt.Errorf("%w on %s: its store is locked (stop it first, or choose another --root): %w", ErrAlreadyRunning, root, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", storeDir, err)
	}
	return store, nil
}

// reportStaleMounts detaches the mounts an earlier run left and logs what
// it found.
func reportStaleMounts(root string, log *slog.Logger) {
	cleaned, err := cleanStaleMounts(root, log)
	if err != nil {
		log.Warn("stale mount check failed", "err", err)
	} else if len(cleaned) > 0 {
		log.Info("cleaned mounts left by an earlier run", "count", len(cleaned))
	}
}

// newHTTPServer serves svc's API to the peers whose uid is the daemon's.
func newHTTPServer(ctx context.Context, svc *Service, log *slog.Logger) *http.Server {
	owner := os.Getuid()
	return &http.Server{
		Handler:           checkPeer(owner, svc.handler()),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext: func(c context.Context, conn net.Conn) context.Context {
			if uid, err := peerUID(conn); err == nil {
				return context.WithValue(c, peerKey{}, uid)
			}
			return c
		},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// notifyReady tells the service manager, if any, that the daemon is
// ready, and starts its watchdog; the function it returns stops the
// watchdog.
func notifyReady(ctx context.Context, n *sdnotify.Notifier, store cas.HasManyer, root string, log *slog.Logger) (stopWatchdog func()) {
	if !n.Enabled() {
		return func() {}
	}
	if err := n.Notify(fmt.Sprintf("READY=1\nMAINPID=%d\nSTATUS=serving %s", os.Getpid(), root)); err != nil {
		log.Warn("could not tell systemd the daemon is ready", "err", err)
	}
	if n.Watchdog <= 0 {
		return func() {}
	}
	wctx, stop := context.WithCancel(ctx)
	go watchdog(wctx, n, store, log)
	log.Info("systemd watchdog on", "interval", n.Watchdog)
	return stop
}

// shutdown stops the server, removes the socket, unmounts and flushes
// every mount and syncs the store; it returns the server's failure, if
// any, else the shutdown's.
func shutdown(cfg Config, srv *http.Server, sock string, svc *Service, store *badgerstore.Store, serveErr error, log *slog.Logger) error {
	if err := cfg.Notify.Notify("STOPPING=1\nSTATUS=unmounting and flushing"); err != nil {
		log.Warn("could not tell systemd the daemon is stopping", "err", err)
	}
	// New requests are refused at once; running ones see ctx canceled.
	// The grace period for busy mounts comes on top.
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second+max(cfg.ShutdownGrace, 0))
	defer cancel()
	_ = srv.Shutdown(shutCtx)
	_ = os.Remove(sock)
	closeErr := svc.Close(shutCtx)
	if closeErr != nil {
		log.Error("unmount and flush", "err", closeErr)
	}
	if err := store.Sync(shutCtx); err != nil {
		closeErr = errors.Join(closeErr, err)
	}
	log.Info("homefs daemon stopped")
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return serveErr
	}
	return closeErr
}

// listen creates the socket with mode 0600, replacing a stale socket file
// only once a connection attempt shows that nobody listens on it.
func listen(sock string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(sock), 0o700); err != nil {
		return nil, err
	}
	if st, err := os.Lstat(sock); err == nil {
		if st.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%s exists and is not a socket: remove it or choose another --socket", sock)
		}
		conn, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			conn.Close()
			return nil, fmt.Errorf("%w: something listens on %s", ErrAlreadyRunning, sock)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("socket %s: %w", sock, err)
		}
		if err := os.Remove(sock); err != nil {
			return nil, fmt.Errorf("remove stale socket %s: %w", sock, err)
		}
	}
	// The umask keeps the socket private from the moment it exists.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", sock)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", sock, err)
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	return ln, nil
}

// peerUID returns the uid of the process at the other end of a Unix
// socket connection (SO_PEERCRED).
func peerUID(conn net.Conn) (int, error) {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return 0, errNoCred
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *syscall.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if credErr != nil {
		return 0, credErr
	}
	return int(cred.Uid), nil
}
