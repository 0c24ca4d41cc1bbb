package fork_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/fork/forktest"
	"github.com/homefs/homefs/manifest"
)

var sentinels = map[string]error{
	"ErrNotFound":        fork.ErrNotFound,
	"ErrAmbiguous":       fork.ErrAmbiguous,
	"ErrDamaged":         fork.ErrDamaged,
	"ErrDiverged":        fork.ErrDiverged,
	"ErrInvalid":         fork.ErrInvalid,
	"ErrUnknownProvider": fork.ErrUnknownProvider,
}

// loadSide stores a fixture's source/ or target/ tree (an empty tree when
// the directory is absent).
func loadSide(t *testing.T, store cas.Store, dir string) cas.Ref {
	t.Helper()
	ctx := context.Background()
	if _, err := os.Stat(dir); os.IsNotExist(err) {
		r, err := manifest.PutTree(ctx, store, &manifest.Tree{})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	r, err := forktest.LoadDir(ctx, store, dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// chunkSet lists the store's refs.
func chunkSet(t *testing.T, store cas.Store) map[cas.Ref]bool {
	t.Helper()
	m := map[cas.Ref]bool{}
	if err := store.Enumerate(context.Background(), func(ci cas.ChunkInfo) error { m[ci.Ref] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return m
}

// assertOnlyTreeNodes fails if the store gained anything but tree nodes:
// bind must copy no byte of a rollout.
func assertOnlyTreeNodes(t *testing.T, store cas.Store, before map[cas.Ref]bool) {
	t.Helper()
	for ref := range chunkSet(t, store) {
		if before[ref] {
			continue
		}
		b, err := store.Get(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := manifest.DecodeTree(b); err != nil {
			t.Errorf("bind stored %s, which is not a tree node (%d bytes): %v", ref.Short(), len(b), err)
		}
	}
}

func readWant(t *testing.T, dir string) want {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "want.json"))
	if err != nil {
		t.Fatal(err)
	}
	var w want
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	return w
}

func TestBindFixtures(t *testing.T) {
	dirs, err := os.ReadDir(fixtureDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < len(fixtures()) {
		t.Fatalf("%d fixture directories, generator has %d", len(dirs), len(fixtures()))
	}
	for _, d := range dirs {
		t.Run(d.Name(), func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(fixtureDir, d.Name())
			w := readWant(t, dir)
			store := cas.NewMemory()
			env := forktest.NewMemEnv(store)
			srcRoot := loadSide(t, store, filepath.Join(dir, "source"))
			tgtRoot := loadSide(t, store, filepath.Join(dir, "target"))
			env.SetRoot("src", srcRoot)
			env.SetRoot("dst", tgtRoot)
			before := chunkSet(t, store)

			req := fork.BindRequest{Provider: w.Provider, ID: "  " + w.ID + "\n", Source: "src", Target: "dst"}
			res, err := fork.Bind(ctx, env, req)
			if w.Error != "" {
				if !errors.Is(err, sentinels[w.Error]) {
					t.Fatalf("Bind: %v; want %s", err, w.Error)
				}
				t.Logf("refused as expected: %v", err)
				if r, _ := env.Root(ctx, "dst"); r != tgtRoot {
					t.Errorf("a refused bind changed the target")
				}
				if len(env.Handles("dst")) != 0 {
					t.Errorf("a refused bind set handles %v", env.Handles("dst"))
				}
				return
			}
			if err != nil {
				t.Fatalf("Bind: %v", err)
			}
			checkResult(t, w, res)
			assertOnlyTreeNodes(t, store, before)
			if r, _ := env.Root(ctx, "src"); r != srcRoot {
				t.Errorf("bind changed the source")
			}
			checkShared(t, env, srcRoot, res)
			if got := env.Handles("dst")[w.Provider]; got.ID != w.ID || got != res.Handle {
				t.Errorf("target handle %+v, result %+v, want id %s", got, res.Handle, w.ID)
			}
			if w.Through != "" && res.Handle.Through != w.Through {
				t.Errorf("through %q, want %q", res.Handle.Through, w.Through)
			}

			// Binding again is a no-op: retry after a crash is safe.
			again, err := fork.Bind(ctx, env, req)
			if err != nil {
				t.Fatalf("second Bind: %v", err)
			}
			for _, b := range again.Rollouts {
				if b.Action != fork.ActionIdentical && b.Action != fork.ActionKeep {
					t.Errorf("second Bind: %s %s", b.Action, b.Path)
				}
			}
			if len(again.Removed) != 0 {
				t.Errorf("second Bind removed %v", again.Removed)
			}
		})
	}
}

func checkResult(t *testing.T, w want, res fork.BindResult) {
	t.Helper()
	if len(res.Rollouts) != len(w.Rollouts) {
		t.Fatalf("bound %+v, want %+v", res.Rollouts, w.Rollouts)
	}
	for i, b := range res.Rollouts {
		if wb := w.Rollouts[i]; b.ID != wb.ID || b.Path != wb.Path || string(b.Action) != wb.Action {
			t.Errorf("rollout %d: %s %s %s, want %s %s %s", i, b.ID, b.Path, b.Action, wb.ID, wb.Path, wb.Action)
		}
	}
	if len(res.Removed) != len(w.Removed) {
		t.Errorf("removed %v, want %v", res.Removed, w.Removed)
	}
	for i := range min(len(res.Removed), len(w.Removed)) {
		if res.Removed[i] != w.Removed[i] {
			t.Errorf("removed %v, want %v", res.Removed, w.Removed)
		}
	}
}

// checkShared checks that every placed entry names the source's chunks.
func checkShared(t *testing.T, env *forktest.MemEnv, srcRoot cas.Ref, res fork.BindResult) {
	t.Helper()
	ctx := context.Background()
	dstRoot, _ := env.Root(ctx, "dst")
	for _, b := range res.Rollouts {
		src := entryAt(t, env, srcRoot, b.SourcePath)
		dst := entryAt(t, env, dstRoot, b.Path)
		if dst == nil {
			t.Fatalf("%s missing in the target", b.Path)
		}
		switch b.Action {
		case fork.ActionAdd, fork.ActionReplace:
			if dst.Size != src.Size || dst.Index != src.Index || len(dst.Chunks) != len(src.Chunks) {
				t.Fatalf("%s: target entry does not name the source's chunks", b.Path)
			}
			for i := range src.Chunks {
				if src.Chunks[i] != dst.Chunks[i] {
					t.Fatalf("%s: chunk %d differs", b.Path, i)
				}
			}
		}
	}
}

func entryAt(t *testing.T, g cas.Getter, root cas.Ref, p string) *manifest.Entry {
	t.Helper()
	var found *manifest.Entry
	err := manifest.Walk(context.Background(), g, root, func(path string, e *manifest.Entry) error {
		if path == p {
			c := *e
			found = &c
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
