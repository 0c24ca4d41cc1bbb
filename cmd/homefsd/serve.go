package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/daemon"
	"github.com/homefs/homefs/internal/remote"
	"github.com/homefs/homefs/internal/sdnotify"
	"github.com/homefs/homefs/internal/version"
)

type serveOptions struct {
	root      string
	socket    string
	logFormat string
	logLevel  string
	uring     string
	grace     time.Duration
	metrics   string
	salvage   bool
	remote    remote.Timeouts
}

// newApp is homefsd's command line: the daemon's flags alone, no
// commands.
func newApp() *cli.App {
	return &cli.App{
		Name:      "homefsd",
		Usage:     "the homefs daemon: owns the store, serves the socket and the mounts",
		UsageText: "homefsd [--root DIR] [--socket PATH] [flags] (or: homefs serve [flags])",
		Version:   version.String(),
		Description: `Runs in the foreground until SIGINT or SIGTERM, then unmounts every mount,
flushes every session and closes the store. A mount with files still open is
detached at once (it leaves the mount table) and those files are served for
--shutdown-grace; then their writes fail, and everything written before is in
the final flush. A second SIGINT or SIGTERM ends it at once, as a crash would
(the next start recovers). Only one daemon may use a root: a second one fails
with a clear message. Dead homefs mounts (left by a crashed run, of this daemon
or another) are detached at start; live ones of other daemons are left alone.
The socket (default <root>/homefs.sock) is mode 0600 and answers only the
daemon's own uid.

FUSE over io_uring is a host-wide kernel switch
(/sys/module/fuse/parameters/enable_uring). --fuse-uring=auto (the default) uses
it only if the host turned it on; --fuse-uring=on turns it on if needed, says so
in the log, and turns it off again at a clean exit; --fuse-uring=off serves every
mount over /dev/fuse.

Under systemd (Type=notify, $NOTIFY_SOCKET) it sends READY=1 once the socket
answers and STOPPING=1 when shutdown begins; with WatchdogSec= it sends
WATCHDOG=1 at half the interval while the store answers a read
(docs/DEPLOY.md).

--metrics ADDR serves Prometheus metrics at http://ADDR/metrics: FUSE requests
and their latency by opcode, errors by errno, flush and capture latency, each
live session's unflushed bytes, the store's size and free space, gc and remote
traffic (docs/CLI.md). ADDR is a loopback host:port or unix:/path (a socket of
mode 0600); any other address is refused, since the metrics name sessions and
are not authenticated.

Every request to a remote is bounded: --remote-connect-timeout for a connect
and TLS handshake, --remote-idle-timeout for a connection that moves no byte
while a request is on it (a server that accepts and never answers, or is
frozen), --remote-request-timeout for one attempt of one request. Connection
failures, timeouts, 5xx and throttling are retried with jittered exponential
backoff for --remote-retry-total after the first attempt (enough to ride out a
restart of the server); then the push or pull fails, and a rerun resumes it. A
lazy read that cannot be served in time fails with EIO.`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "root", Usage: "daemon state directory (store, socket, mounts.json)", EnvVars: []string{"HOMEFS_ROOT"}, Value: api.DefaultRoot},
			&cli.StringFlag{Name: "socket", Usage: "daemon socket (default: <root>/" + api.SocketName + ")", EnvVars: []string{"HOMEFS_SOCKET"}},
			&cli.StringFlag{Name: "log-format", Value: "text", Usage: "log format: text or json"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "log level: debug, info, warn or error"},
			&cli.StringFlag{Name: "fuse-uring", Value: "auto", Usage: "FUSE over io_uring (Linux 6.14+): auto uses it if the host's switch /sys/module/fuse/parameters/enable_uring is on and never changes it; on turns the switch on if needed and off again at a clean exit; off serves every mount over /dev/fuse"},
			&cli.StringFlag{Name: "metrics", Usage: "serve Prometheus metrics at /metrics on `ADDR`: a loopback host:port (127.0.0.1:9477) or unix:/path; off by default (docs/CLI.md lists them)"},
			&cli.BoolFlag{Name: "salvage", Usage: "open a store whose newest log is damaged (refused otherwise, exit 8): keep a copy of each damaged log under <root>/store/damaged-<time>/, give each damaged entry whose header is intact a new checksum (only its chunk is lost; other damage is cut off with what follows it) and start; run homefs fsck next. A session whose journal is damaged (exit 8 from mount) is then loaded with the journal's records before the damage; a copy of the journal stays beside it"},
			&cli.DurationFlag{Name: "remote-connect-timeout", Value: remote.DefaultConnectTimeout, Usage: "bound on a TCP connect and TLS handshake to a remote"},
			&cli.DurationFlag{Name: "remote-idle-timeout", Value: remote.DefaultIdleTimeout, Usage: "a request to a remote fails once its connection moved no byte for this long"},
			&cli.DurationFlag{Name: "remote-request-timeout", Value: remote.DefaultRequestTimeout, Usage: "bound on one attempt of one request to a remote, body included"},
			&cli.DurationFlag{Name: "remote-retry-total", Value: remote.DefaultRetryTotal, Usage: "how long a failing request to a remote is retried (backoff with jitter) before the operation fails; 0s: no retries"},
			&cli.DurationFlag{Name: "shutdown-grace", Value: 5 * time.Second, Usage: "at shutdown, how long files left open in a busy mount are still served after the mount was detached; then their writes fail, and everything written before is flushed"},
		},
		HideHelpCommand:      true,
		EnableBashCompletion: true,
		ExitErrHandler:       func(*cli.Context, error) {}, // main prints and exits
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError{fmt.Errorf("unexpected argument %q: homefsd takes flags only (see homefsd --help)", c.Args().First())}
			}
			return runServe(c.Context, serveOptions{
				root: c.String("root"), socket: c.String("socket"),
				logFormat: c.String("log-format"), logLevel: c.String("log-level"),
				uring: c.String("fuse-uring"), grace: c.Duration("shutdown-grace"),
				metrics: c.String("metrics"), salvage: c.Bool("salvage"),
				remote: remote.Timeouts{
					Connect: c.Duration("remote-connect-timeout"), Idle: c.Duration("remote-idle-timeout"),
					Request: c.Duration("remote-request-timeout"), RetryTotal: c.Duration("remote-retry-total"),
				},
			})
		},
	}
}

func runServe(ctx context.Context, o serveOptions) error {
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return usageError{fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)}
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch o.logFormat {
	case "text":
		h = slog.NewTextHandler(os.Stderr, hopts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, hopts)
	default:
		return usageError{fmt.Errorf("--log-format %q: want text or json", o.logFormat)}
	}
	uring, err := fusefs.ParseURingMode(o.uring)
	if err != nil {
		return usageError{fmt.Errorf("--fuse-uring: %w", err)}
	}
	if o.metrics != "" {
		if _, _, err := daemon.ParseMetricsAddr(o.metrics); err != nil {
			return usageError{fmt.Errorf("--metrics: %w", err)}
		}
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{
		{"--remote-connect-timeout", o.remote.Connect}, {"--remote-idle-timeout", o.remote.Idle},
		{"--remote-request-timeout", o.remote.Request}, {"--remote-retry-total", o.remote.RetryTotal},
	} {
		if f.d < 0 || (f.d == 0 && f.name != "--remote-retry-total") {
			return usageError{fmt.Errorf("%s %v: want a positive duration", f.name, f.d)}
		}
	}
	if o.remote.RetryTotal == 0 {
		o.remote.RetryTotal = -1 // no retries; 0 would mean the default
	}
	log := slog.New(h)
	if b, err := os.ReadFile("/proc/sys/kernel/threads-max"); err == nil {
		if n := threadLimit(string(b)); n > 0 {
			debug.SetMaxThreads(n)
		}
	}
	notify, err := sdnotify.FromEnv()
	if err != nil {
		log.Warn("systemd watchdog off", "err", err)
	}
	// The first signal asks for a clean shutdown, which waits for every
	// mount and the store (a store whose disk fails can keep it waiting):
	// a second one ends the process at once, as a crash would, which the
	// next serve recovers from.
	defer context.AfterFunc(ctx, func() {
		signal.Reset(syscall.SIGINT, syscall.SIGTERM)
		log.Info("shutting down: a second SIGINT or SIGTERM exits at once, as a crash would")
	})()
	err = daemon.Serve(ctx, daemon.Config{Root: o.root, Socket: o.socket, Logger: log, URing: uring, Notify: notify, ShutdownGrace: o.grace, Metrics: o.metrics,
		RemoteTimeouts: o.remote, Badger: badgerstore.Options{Salvage: o.salvage}})
	if err != nil && ctx.Err() == nil {
		return err
	}
	return err
}

// goMaxThreads is the Go runtime's default limit on OS threads, past which
// it ends the process.
const goMaxThreads = 10000

// threadLimit is the thread limit the daemon sets, given the kernel's
// (kernel.threads-max): the kernel's when it is higher than Go's default,
// else 0 (leave it). Threads grow with mounts over /dev/fuse: each
// mount's go-fuse readers wait in read(2), a thread each (docs/DEPLOY.md,
// Scale; over io_uring the daemon's ring threads serve every mount), so
// at a thousand mounts on a host with many CPUs Go's default would end
// the daemon long before the kernel or the unit's TasksMax refuse a
// thread.
func threadLimit(threadsMax string) int {
	n, err := strconv.Atoi(strings.TrimSpace(threadsMax))
	if err != nil || n <= goMaxThreads {
		return 0
	}
	return n
}
