package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/remote/s3test"
)

// scrape fetches /metrics from a daemon serving them on the Unix socket
// sock and returns each sample's value by its name and labels, as the text
// format writes them (`name{label="v"}`).
func scrape(t *testing.T, sock string) map[string]float64 {
	t.Helper()
	client := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}},
	}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://homefs/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		require.NoError(t, err, line)
		out[line[:i]] = v
	}
	require.NoError(t, sc.Err())
	return out
}

// TestServeMetrics: serve --metrics exports what the daemon serves, and the
// counters move with what a mount and a capture do.
func TestServeMetrics(t *testing.T) {
	e := newEnv(t)
	sock := filepath.Join(e.dir, "metrics.sock")
	e.start("--metrics", "unix:"+sock)
	mnt := e.mkdir("m")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)

	before := scrape(t, sock)
	for _, name := range []string{"homefs_store_bytes", "homefs_store_free_bytes", "homefs_store_filesystem_bytes", "homefs_gc_runs_total", "homefs_capture_duration_seconds_count"} {
		require.Contains(t, before, name)
	}
	require.Greater(t, before["homefs_store_free_bytes"], 0.0)

	// O_RDWR: the daemon serves the writes (fusefs/doc.go). The periodic
	// flush may take them before the scrape: then write more.
	var during map[string]float64
	for i := range 5 {
		f, err := os.OpenFile(filepath.Join(mnt, "f"+strconv.Itoa(i)), os.O_RDWR|os.O_CREATE, 0o644)
		require.NoError(t, err)
		_, err = f.Write([]byte(strings.Repeat("metrics ", 4096)))
		require.NoError(t, err)
		require.NoError(t, f.Close())
		during = scrape(t, sock)
		if during[`homefs_session_dirty_bytes{session="s"}`] > 0 {
			break
		}
	}
	require.Greater(t, during[`homefs_session_dirty_bytes{session="s"}`], 0.0, "dirty bytes before the capture")
	require.Contains(t, during, `homefs_session_journal_bytes{session="s"}`)
	for _, op := range []string{"create", "write"} {
		name := `homefs_fuse_request_duration_seconds_count{op="` + op + `"}`
		require.Greater(t, during[name], before[name], name)
	}
	// The kernel asks the daemon to remove a directory, which refuses.
	require.NoError(t, os.MkdirAll(filepath.Join(mnt, "d", "e"), 0o755))
	require.ErrorIs(t, os.Remove(filepath.Join(mnt, "d")), syscall.ENOTEMPTY)

	e.ok("capture", "s")
	after := scrape(t, sock)
	require.Equal(t, before["homefs_capture_duration_seconds_count"]+1, after["homefs_capture_duration_seconds_count"])
	require.Zero(t, after[`homefs_session_dirty_bytes{session="s"}`], "a capture flushes")
	require.Greater(t, after[`homefs_fuse_errors_total{errno="ENOTEMPTY",op="rmdir"}`], 0.0)

	e.ok("gc")
	require.Equal(t, after["homefs_gc_runs_total"]+1, scrape(t, sock)["homefs_gc_runs_total"])
	e.stop()
	_, err := os.Stat(sock)
	require.True(t, os.IsNotExist(err), "the metrics socket is gone after the daemon")
}

// TestServeMetricsRefusesRemoteAddr: metrics are never offered beyond the
// host; the refusal is a usage error, before anything starts.
func TestServeMetricsRefusesRemoteAddr(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9477", ":9477", "192.0.2.1:9477"} {
		cmd := exec.Command(homefsBin, "serve", "--root", t.TempDir(), "--metrics", addr)
		cmd.Stdout = io.Discard
		var stderr strings.Builder
		cmd.Stderr = &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, addr)
		require.Equal(t, exitUsage, ee.ExitCode(), "%s: %s", addr, stderr.String())
		require.Contains(t, stderr.String(), "only a loopback address", addr)
	}
}

// TestServeMetricsRemote: a push moves the push counters and the remote
// client's byte counter.
func TestServeMetricsRemote(t *testing.T) {
	needFUSE(t)
	srv := s3test.Start(t)
	e := newEnv(t)
	e.daemonEnv = []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
	sock := filepath.Join(e.dir, "metrics.sock")
	e.start("--metrics", "unix:"+sock)
	e.ok("remote", "add", "origin", "s3://"+srv.Bucket(t)+"/m", "--endpoint", srv.Endpoint)
	mnt := e.mkdir("m")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)
	writeFile(t, filepath.Join(mnt, "big.bin"), randomText(256<<10, 2))
	e.ok("capture", "s")
	e.ok("push", "s", "origin")
	got := scrape(t, sock)
	require.Equal(t, 1.0, got[`homefs_remote_pushes_total{remote="origin"}`])
	require.Zero(t, got[`homefs_remote_push_failures_total{remote="origin"}`])
	require.Greater(t, got[`homefs_remote_pushed_objects_total{remote="origin"}`], 0.0)
	require.Greater(t, got[`homefs_remote_pushed_bytes_total{remote="origin"}`], 0.0)
	require.Greater(t, got[`homefs_remote_bytes_total{direction="out",remote="origin"}`], 0.0)
	require.Greater(t, got[`homefs_remote_requests_total{kind="put",remote="origin"}`], 0.0)
}
