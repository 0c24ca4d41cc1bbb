package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote"
)

// syncBuffer is a log sink read while the service writes to it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) has(s string) bool { return strings.Contains(b.String(), s) }

// waitFor polls cond until it holds, failing the test after a generous
// deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// The last run of a session releasing a busy mount retries its unmount
// without holding runMu, so that a run of another session starts
// meanwhile, and gives up as soon as the service closes.
func TestReleaseRunBusyMount(t *testing.T) {
	ctx := context.Background()
	logs := &syncBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	svc, err := newService(ctx, t.TempDir(), cas.NewMemory(), log, fusefs.URingOff, 100*time.Millisecond, nil, remote.Timeouts{}, false)
	if err != nil {
		t.Fatal(err)
	}
	// Also on a failure: a process that exits with a file of its own
	// mount open waits for itself forever.
	t.Cleanup(func() {
		if err := svc.Close(ctx); err != nil {
			t.Error(err)
		}
		svc.CloseStore()
	})
	for _, name := range []string{"busy", "other"} {
		if _, err := svc.CreateSession(ctx, api.CreateSessionRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	info, release, err := svc.RunMount(ctx, "busy", "")
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(info.Dir, "open"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	released := make(chan struct{})
	go func() {
		release()
		close(released)
	}()
	waitFor(t, "the run's release", func() bool { return logs.has("run ended") })

	// The release retries the busy mount's unmount for seconds: another
	// session's run must not wait for it to give up.
	_, releaseOther, err := svc.RunMount(ctx, "other", "")
	if err != nil {
		t.Fatal(err)
	}
	releaseOther()
	if logs.has("could not unmount a run's mount") {
		t.Fatal("another session's run waited for a busy run mount's release to give up")
	}
	select {
	case <-released:
		t.Fatal("the release of a busy run mount returned while it was busy")
	default:
	}

	// The service's close begins (Close ends its life first): the release
	// stops waiting for the busy mount, which the close unmounts.
	svc.endLife()
	waitFor(t, "the release to end with the service", func() bool {
		select {
		case <-released:
			return true
		default:
			return false
		}
	})
	if !logs.has("a run's mount is left to the daemon's close") {
		t.Fatalf("the release did not leave the mount to the close; log:\n%s", logs)
	}
	if still, err := isMountpoint(info.Dir); err != nil || !still {
		t.Fatalf("the busy run mount is gone before the close (%v)", err)
	}
}
