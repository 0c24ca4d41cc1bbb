package fusefs

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
)

// NewTestEngine returns an Engine over store (a fresh memory store when
// nil), closed when the test ends.
func NewTestEngine(t testing.TB, store cas.Store) *Engine {
	t.Helper()
	return newTestEngine(t, store, Options{})
}

// newTestEngine is NewTestEngine with opts (StoreDir and Logger are set
// here).
func newTestEngine(t testing.TB, store cas.Store, opts Options) *Engine {
	t.Helper()
	if store == nil {
		store = cas.NewMemory()
	}
	opts.StoreDir = t.TempDir()
	opts.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	e := New(store, catalog.New(store), opts)
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	return e
}

// MountForTest mounts session (created empty if missing) at a new
// temporary directory and unmounts it when the test ends.
func MountForTest(t testing.TB, e *Engine, session, subtree string, opts MountOptions) *Mount {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Catalog().Head(ctx, session); errors.Is(err, catalog.ErrNoSession) {
		if _, err := e.Catalog().CreateSession(ctx, session, ""); err != nil {
			t.Fatalf("create session %s: %v", session, err)
		}
	}
	m, err := e.Mount(ctx, session, subtree, t.TempDir(), opts)
	if err != nil {
		t.Fatalf("mount %s: %v", session, err)
	}
	t.Cleanup(func() {
		// A file the test closed a moment ago can hold the mount until
		// the kernel's deferred release of it has run: a busy unmount
		// is tried again for a while.
		err := m.Unmount()
		for deadline := time.Now().Add(5 * time.Second); errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			err = m.Unmount()
		}
		if err != nil && !errors.Is(err, ErrNotMounted) {
			t.Errorf("unmount: %v", err)
		}
	})
	return m
}
