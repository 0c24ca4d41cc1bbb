package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/fusefs"
)

// ErrMetricsAddr is returned for a --metrics address the daemon refuses.
var ErrMetricsAddr = errors.New("bad metrics address")

// ParseMetricsAddr splits a --metrics address into a network and an
// address to listen on: "unix:/path" is a Unix socket, anything else a
// TCP host:port whose host is a loopback IP or "localhost". The metrics
// name sessions and carry no authentication, so they are never offered
// beyond the host.
func ParseMetricsAddr(s string) (network, addr string, err error) {
	if path, ok := strings.CutPrefix(s, "unix:"); ok {
		if !filepath.IsAbs(path) {
			return "", "", fmt.Errorf("%w %q: a Unix socket needs an absolute path (unix:/run/homefs/metrics.sock)", ErrMetricsAddr, s)
		}
		return "unix", path, nil
	}
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", "", fmt.Errorf("%w %q: want 127.0.0.1:PORT, [::1]:PORT, localhost:PORT or unix:/PATH", ErrMetricsAddr, s)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return "", "", fmt.Errorf("%w %q: only a loopback address is allowed (127.0.0.1:%s), since the metrics are not authenticated; put a proxy in front to export them further", ErrMetricsAddr, s, port)
	}
	return "tcp", s, nil
}

// fuseBuckets span a cached getattr (µs) to a flush-bound fsync (s).
var fuseBuckets = prometheus.ExponentialBuckets(10e-6, 4, 10)

// slowBuckets are for flushes and captures: 1 ms to about a minute.
var slowBuckets = prometheus.ExponentialBuckets(1e-3, 4, 9)

// maxCachedErrno bounds the errnos whose error counters are cached per
// opcode; Linux's errnos are below it.
const maxCachedErrno = 140

// metrics is the daemon's Prometheus registry and what feeds it. It is
// the engine's fusefs.Observer. A nil *metrics observes nothing, so the
// daemon calls it whether or not --metrics is on.
type metrics struct {
	reg *prometheus.Registry

	// fuseLatency holds the histogram of each opcode, resolved once: a
	// request costs two clock reads and an Observe, no lookup, no lock.
	fuseLatency [fusefs.NumOps]prometheus.Observer
	fuseErrors  *prometheus.CounterVec
	// errCache holds the error counter of each (opcode, errno) once it
	// was first counted: an errno is exported only once it happened.
	errCache [fusefs.NumOps][maxCachedErrno]atomic.Pointer[prometheus.Counter]

	flushLatency   prometheus.Histogram
	flushFailures  prometheus.Counter
	captureLatency prometheus.Histogram
	captureFails   prometheus.Counter

	gcRuns        prometheus.Counter
	gcFailures    prometheus.Counter
	gcFreedChunks prometheus.Counter
	gcFreedBytes  prometheus.Counter

	pushes, pushFailures, pushBytes, pushObjects *prometheus.CounterVec
	pulls, pullFailures, pullBytes, pullObjects  *prometheus.CounterVec
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
		m.reg.MustRegister(c)
		return c
	}
	perRemote := func(name, help string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"remote"})
		m.reg.MustRegister(c)
		return c
	}
	histogram := func(name, help string) prometheus.Histogram {
		h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: slowBuckets})
		m.reg.MustRegister(h)
		return h
	}
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "homefs_fuse_request_duration_seconds",
		Help:    "Time to answer a FUSE request, by opcode, from the gate that sees every request of every mount.",
		Buckets: fuseBuckets,
	}, []string{"op"})
	m.fuseErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "homefs_fuse_errors_total",
		Help: "FUSE requests answered with an error, by opcode and errno name.",
	}, []string{"op", "errno"})
	m.reg.MustRegister(lat, m.fuseErrors)
	for op := range fusefs.NumOps {
		m.fuseLatency[op] = lat.WithLabelValues(op.String())
	}
	m.flushLatency = histogram("homefs_flush_duration_seconds", "Time of a flush that stored a session's changes (periodic, fsync, sync, shutdown).")
	m.flushFailures = counter("homefs_flush_failures_total", "Flushes that failed; their changes stay for the next one.")
	m.captureLatency = histogram("homefs_capture_duration_seconds", "Time of a capture, from the request to the snapshot recorded.")
	m.captureFails = counter("homefs_capture_failures_total", "Captures that failed.")
	m.gcRuns = counter("homefs_gc_runs_total", "Garbage collections run.")
	m.gcFailures = counter("homefs_gc_failures_total", "Garbage collections that failed.")
	m.gcFreedChunks = counter("homefs_gc_freed_chunks_total", "Chunks deleted by garbage collection.")
	m.gcFreedBytes = counter("homefs_gc_freed_bytes_total", "Plain bytes of the chunks deleted by garbage collection.")
	m.pushes = perRemote("homefs_remote_pushes_total", "Pushes to a remote, by remote.")
	m.pushFailures = perRemote("homefs_remote_push_failures_total", "Pushes to a remote that failed, by remote.")
	m.pushBytes = perRemote("homefs_remote_pushed_bytes_total", "Stored (compressed) bytes uploaded by pushes, by remote.")
	m.pushObjects = perRemote("homefs_remote_pushed_objects_total", "Objects uploaded by pushes, by remote.")
	m.pulls = perRemote("homefs_remote_pulls_total", "Pulls from a remote, by remote.")
	m.pullFailures = perRemote("homefs_remote_pull_failures_total", "Pulls from a remote that failed, by remote.")
	m.pullBytes = perRemote("homefs_remote_pulled_bytes_total", "Plain bytes fetched by pulls, by remote.")
	m.pullObjects = perRemote("homefs_remote_pulled_objects_total", "Objects fetched by pulls, by remote.")
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Request implements fusefs.Observer.
func (m *metrics) Request(op fusefs.Op, errno syscall.Errno, d time.Duration) {
	m.fuseLatency[op].Observe(d.Seconds())
	if errno != 0 {
		m.fuseError(op, errno).Inc()
	}
}

func (m *metrics) fuseError(op fusefs.Op, errno syscall.Errno) prometheus.Counter {
	if errno >= maxCachedErrno {
		return m.fuseErrors.WithLabelValues(op.String(), errnoName(errno))
	}
	slot := &m.errCache[op][errno]
	if c := slot.Load(); c != nil {
		return *c
	}
	c := m.fuseErrors.WithLabelValues(op.String(), errnoName(errno))
	slot.CompareAndSwap(nil, &c) // a racing first use resolves the same child
	return c
}

func errnoName(errno syscall.Errno) string {
	if name := unix.ErrnoName(errno); name != "" {
		return name
	}
	return fmt.Sprintf("errno%d", int(errno))
}

// Flush implements fusefs.Observer.
func (m *metrics) Flush(d time.Duration, err error) {
	m.flushLatency.Observe(d.Seconds())
	if err != nil {
		m.flushFailures.Inc()
	}
}

// observer is m as the engine's Observer: nil stays nil, so that the
// engine's requests cost no more than a comparison with metrics off.
func (m *metrics) observer() fusefs.Observer {
	if m == nil {
		return nil
	}
	return m
}

func (m *metrics) capture(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.captureLatency.Observe(d.Seconds())
	if err != nil {
		m.captureFails.Inc()
	}
}

func (m *metrics) gc(res *fusefs.GCResult, err error) {
	if m == nil {
		return
	}
	m.gcRuns.Inc()
	if err != nil {
		m.gcFailures.Inc()
	}
	if res != nil {
		m.gcFreedChunks.Add(float64(res.Freed))
		m.gcFreedBytes.Add(float64(res.FreedBytes))
	}
}

func (m *metrics) push(remote string, objects int, bytes int64, err error) {
	if m == nil {
		return
	}
	m.pushes.WithLabelValues(remote).Inc()
	if err != nil {
		m.pushFailures.WithLabelValues(remote).Inc()
		return
	}
	m.pushObjects.WithLabelValues(remote).Add(float64(objects))
	m.pushBytes.WithLabelValues(remote).Add(float64(bytes))
}

func (m *metrics) pull(remote string, objects int, bytes int64, err error) {
	if m == nil {
		return
	}
	m.pulls.WithLabelValues(remote).Inc()
	if err != nil {
		m.pullFailures.WithLabelValues(remote).Inc()
		return
	}
	m.pullObjects.WithLabelValues(remote).Add(float64(objects))
	m.pullBytes.WithLabelValues(remote).Add(float64(bytes))
}

// stateCollector reads, at scrape time, what the daemon already keeps for
// homefs status: each live session's unflushed changes, the store's size
// and the free space of its file system, and the remote clients' counters.
// Nothing on the write path updates a metric for it.
type stateCollector struct{ s *Service }

var (
	descDirty = prometheus.NewDesc("homefs_session_dirty_bytes",
		"Bytes written to a live session and not yet flushed to the store (write buffers and staged files), as homefs status shows.", []string{"session"}, nil)
	descJournal = prometheus.NewDesc("homefs_session_journal_bytes",
		"Bytes fsyncs wrote to a live session's write-ahead journal since its last flush.", []string{"session"}, nil)
	descDirtyEntries = prometheus.NewDesc("homefs_session_dirty_entries",
		"Files and directories of a live session changed since its last flush.", []string{"session"}, nil)
	descLastFlush = prometheus.NewDesc("homefs_session_last_flush_timestamp_seconds",
		"When a live session's head last durably took every change (Unix time).", []string{"session"}, nil)
	descStoreBytes = prometheus.NewDesc("homefs_store_bytes",
		"Disk space used by the store directory.", nil, nil)
	descStoreFree = prometheus.NewDesc("homefs_store_free_bytes",
		"Free space (for unprivileged users) of the file system holding the store.", nil, nil)
	descStoreTotal = prometheus.NewDesc("homefs_store_filesystem_bytes",
		"Size of the file system holding the store.", nil, nil)
	descRemoteRequests = prometheus.NewDesc("homefs_remote_requests_total",
		"Requests sent to a remote since the daemon opened it, by remote and kind (get, put, head, list).", []string{"remote", "kind"}, nil)
	descRemoteBytes = prometheus.NewDesc("homefs_remote_bytes_total",
		"Object bytes moved to or from a remote since the daemon opened it (pushes, pulls and lazy reads), by remote and direction (in, out).", []string{"remote", "direction"}, nil)
)

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDirty, descJournal, descDirtyEntries, descLastFlush, descStoreBytes, descStoreFree, descStoreTotal, descRemoteRequests, descRemoteBytes} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	count := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, name := range c.s.eng.LiveSessions() {
		st, ok := c.s.eng.SessionState(name)
		if !ok {
			continue // ended since it was listed
		}
		gauge(descDirty, float64(st.DirtyBytes+st.StagedBytes), name)
		gauge(descJournal, float64(st.JournalBytes), name)
		gauge(descDirtyEntries, float64(st.DirtyEntries), name)
		if !st.LastFlush.IsZero() {
			gauge(descLastFlush, float64(st.LastFlush.UnixNano())/1e9, name)
		}
	}
	st := storeStatus(filepath.Join(c.s.root, "store"))
	gauge(descStoreBytes, float64(st.Bytes))
	gauge(descStoreFree, float64(st.FreeBytes))
	gauge(descStoreTotal, float64(st.TotalBytes))
	for name, rs := range c.s.remotes.Stats() {
		count(descRemoteRequests, rs.Gets, name, "get")
		count(descRemoteRequests, rs.Puts, name, "put")
		count(descRemoteRequests, rs.Heads, name, "head")
		count(descRemoteRequests, rs.Lists, name, "list")
		count(descRemoteBytes, rs.BytesIn, name, "in")
		count(descRemoteBytes, rs.BytesOut, name, "out")
	}
}

// serveMetrics listens on addr (ParseMetricsAddr) and serves s's metrics
// at /metrics until ctx ends.
func serveMetrics(ctx context.Context, s *Service, addr string, log *slog.Logger) (stop func(), err error) {
	network, laddr, err := ParseMetricsAddr(addr)
	if err != nil {
		return nil, err
	}
	var ln net.Listener
	if network == "unix" {
		ln, err = listen(laddr)
	} else {
		ln, err = net.Listen(network, laddr)
	}
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	m := s.metrics
	m.reg.MustRegister(stateCollector{s})
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn), Timeout: 30 * time.Second,
	}))
	srv := &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx },
		ErrorLog:    slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("metrics served", "addr", ln.Addr().String(), "path", "/metrics")
	return func() {
		_ = srv.Close()
		if network == "unix" {
			_ = os.Remove(laddr)
		}
	}, nil
}
