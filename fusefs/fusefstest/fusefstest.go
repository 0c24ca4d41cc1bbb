// Package fusefstest gives other packages' tests an engine and real kernel
// mounts of fusefs, closed and unmounted when the test ends (as
// net/http/httptest does for servers). fusefs's own tests keep their
// helpers in its test files, since they need its unexported parts.
package fusefstest

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/catalog"
)

// NewEngine returns an Engine over store (a fresh memory store when nil),
// with its state in a temporary directory, closed when the test ends.
func NewEngine(t testing.TB, store cas.Store) *fusefs.Engine {
	t.Helper()
	if store == nil {
		store = cas.NewMemory()
	}
	e := fusefs.New(store, catalog.New(store), fusefs.Options{
		StoreDir: t.TempDir(),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	return e
}

// Mount mounts session (created empty if missing) at a new temporary
// directory and unmounts it when the test ends.
func Mount(t testing.TB, e *fusefs.Engine, session string) *fusefs.Mount {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Catalog().Head(ctx, session); errors.Is(err, catalog.ErrNoSession) {
		if _, err := e.Catalog().CreateSession(ctx, session, ""); err != nil {
			t.Fatalf("create session %s: %v", session, err)
		}
	}
	m, err := e.Mount(ctx, session, "", t.TempDir(), fusefs.MountOptions{})
	if err != nil {
		t.Fatalf("mount %s: %v", session, err)
	}
	t.Cleanup(func() {
		// A file the test closed a moment ago can hold the mount until
		// the kernel's deferred release of it has run.
		err := m.Unmount()
		for deadline := time.Now().Add(5 * time.Second); errors.Is(err, syscall.EBUSY) && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			err = m.Unmount()
		}
		if err != nil && !errors.Is(err, fusefs.ErrNotMounted) {
			t.Errorf("unmount: %v", err)
		}
	})
	return m
}
