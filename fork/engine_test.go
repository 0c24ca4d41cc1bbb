package fork_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/fusefs/fusefstest"
	"github.com/homefs/homefs/internal/testkit/needfuse"
)

// TestBindWithEngine binds through the real fusefs.Engine: rollouts are
// written into the source through its FUSE mount, bound into a mounted
// target, and read back there; the store gains no file chunk.
func TestBindWithEngine(t *testing.T) {
	needfuse.Require(t)
	ctx := context.Background()
	store := cas.NewMemory()
	e := fusefstest.NewEngine(t, store)
	src := fusefstest.Mount(t, e, "src")
	dst := fusefstest.Mount(t, e, "dst")

	// The chain fixture, written through the source mount.
	files := map[string]string{}
	for _, f := range fixtures() {
		if f.name == "chain" {
			files = f.source
		}
	}
	writeFiles(t, src.Dir(), files)
	state := filepath.Join(dst.Dir(), "codex-home", "state_5.sqlite")
	os.MkdirAll(filepath.Dir(state), 0o755)
	if err := os.WriteFile(state, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Root(ctx, "src"); err != nil { // flush the writes
		t.Fatal(err)
	}
	if _, err := e.Root(ctx, "dst"); err != nil {
		t.Fatal(err)
	}
	before := chunkSet(t, store)

	env := fork.WithStore(e, store)
	res, err := fork.Bind(ctx, env, fork.BindRequest{Provider: "codex", ID: idChild, Source: "src", Target: "dst"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rollouts) != 3 || len(res.Removed) != 1 {
		t.Fatalf("result %+v", res)
	}
	assertOnlyTreeNodes(t, store, before)
	checkTargetFiles(t, dst.Dir(), files)
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state_5.sqlite still in the target: %v", err)
	}
	h, err := e.Catalog().Head(ctx, "dst")
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Handles["codex"]; got != res.Handle || got.ID != idChild {
		t.Errorf("target head handle %+v, want %+v", got, res.Handle)
	}
	// Appending in the target leaves the source alone.
	p := filepath.Join(dst.Dir(), filepath.FromSlash(codexPath(2, idChild)))
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(record(9, "response_item", map[string]string{"type": "message"}))
	f.Close()
	b, err := os.ReadFile(filepath.Join(src.Dir(), filepath.FromSlash(codexPath(2, idChild))))
	if err != nil || string(b) != files[codexPath(2, idChild)] {
		t.Fatalf("the source changed after an append in the target: %v", err)
	}
	// Bind again: the target extends the source now, and is kept.
	res, err = fork.Bind(ctx, env, fork.BindRequest{Provider: "codex", ID: idChild, Source: "src", Target: "dst"})
	if err != nil {
		t.Fatal(err)
	}
	if a := res.Rollouts[2].Action; a != fork.ActionKeep || res.Handle.Through != "9" {
		t.Errorf("rebind: %s through %q, want keep through 9", a, res.Handle.Through)
	}
}

// writeFiles writes files (slash paths below dir) with mode 0600.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		fp := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(fp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// checkTargetFiles requires every file of files below dir, with its content and
// mode 0600.
func checkTargetFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil || string(b) != content {
			t.Fatalf("%s through the target mount: %v", p, err)
		}
		st, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, %v", p, st.Mode(), err)
		}
	}
}
