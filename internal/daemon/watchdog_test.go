package daemon

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/sdnotify"
)

// manager is a service manager's notification socket.
type manager struct {
	t    *testing.T
	conn *net.UnixConn
	path string
}

func newManager(t *testing.T) *manager {
	// Short: a socket path is at most 107 bytes.
	dir, err := os.MkdirTemp("", "sdn")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	p := filepath.Join(dir, "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &manager{t: t, conn: c, path: p}
}

// next returns the next datagram, or "" if none came within d.
func (m *manager) next(d time.Duration) string {
	buf := make([]byte, 4096)
	_ = m.conn.SetReadDeadline(time.Now().Add(d))
	k, err := m.conn.Read(buf)
	if err != nil {
		return ""
	}
	return string(buf[:k])
}

// TestServeNotifies: a daemon under systemd says READY=1 once its socket
// answers, pings the watchdog while its store answers, and says
// STOPPING=1 when it shuts down.
func TestServeNotifies(t *testing.T) {
	m := newManager(t)
	n := sdnotify.New(m.path)
	n.Watchdog = 200 * time.Millisecond
	root := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, Config{Root: root, Logger: slog.New(slog.DiscardHandler), Notify: n})
	}()
	ready := m.next(20 * time.Second)
	require.True(t, strings.HasPrefix(ready, "READY=1\n"), "%q", ready)
	require.Contains(t, ready, "MAINPID=")
	_, err := api.NewClient(api.DefaultSocket(root)).Status(context.Background())
	require.NoError(t, err, "ready means the socket answers")
	for range 3 {
		require.Equal(t, "WATCHDOG=1", m.next(2*time.Second))
	}
	cancel()
	for {
		msg := m.next(10 * time.Second)
		require.NotEmpty(t, msg, "no STOPPING=1")
		if strings.HasPrefix(msg, "STOPPING=1") {
			break
		}
		require.Equal(t, "WATCHDOG=1", msg)
	}
	require.NoError(t, <-done)
}

// hungStore answers HasMany only once released, or fails.
type hungStore struct {
	release chan struct{}
	err     error
}

func (s *hungStore) HasMany(ctx context.Context, refs []cas.Ref) ([]bool, error) {
	<-s.release
	return make([]bool, len(refs)), s.err
}

// TestWatchdogStoreHangs: no ping while the store does not answer, or
// fails; pings again once it answers.
func TestWatchdogStoreHangs(t *testing.T) {
	for _, failing := range []bool{false, true} {
		m := newManager(t)
		n := sdnotify.New(m.path)
		n.Watchdog = 100 * time.Millisecond
		st := &hungStore{release: make(chan struct{})}
		if failing {
			st.err = errors.New("disk on fire")
			close(st.release)
		}
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() {
			defer close(stopped)
			watchdog(ctx, n, st, slog.New(slog.DiscardHandler))
		}()
		require.Empty(t, m.next(500*time.Millisecond), "failing=%v: pinged", failing)
		if !failing {
			close(st.release)
			require.Equal(t, "WATCHDOG=1", m.next(time.Second))
		}
		cancel()
		<-stopped
	}
}
