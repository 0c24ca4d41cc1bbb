package catalog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// A snapshot captured in one store is added to another, lineage first.
func TestAddSnapshot(t *testing.T) {
	ctx := context.Background()
	src, dst := cas.NewMemory(), cas.NewMemory()
	a, b := catalog.New(src), catalog.New(dst)
	if _, err := a.CreateSession(ctx, "s", ""); err != nil {
		t.Fatal(err)
	}
	root, err := manifest.PutTree(ctx, src, &manifest.Tree{})
	if err != nil {
		t.Fatal(err)
	}
	_, id1, err := a.Capture(ctx, "s", root, "one", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, id2, err := a.Capture(ctx, "s", root, "two", nil)
	if err != nil {
		t.Fatal(err)
	}
	rec1, _, err := a.Record(ctx, id1)
	if err != nil {
		t.Fatal(err)
	}
	rec2, _, err := a.Record(ctx, id2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := manifest.PutTree(ctx, dst, &manifest.Tree{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.AddSnapshot(ctx, rec2); !errors.Is(err, catalog.ErrNoSnapshot) {
		t.Fatalf("add before its parent: %v, want ErrNoSnapshot", err)
	}
	for _, rec := range [][]byte{rec1, rec2, rec2} {
		if _, _, err := b.AddSnapshot(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := b.HasSnapshot(ctx, id2); err != nil || !ok {
		t.Fatalf("HasSnapshot: %v %v", ok, err)
	}
	if _, err := b.Fork(ctx, id2, "t"); err != nil {
		t.Fatal(err)
	}
	if log, err := b.Log(ctx, "t"); err != nil || len(log) != 2 {
		t.Fatalf("log of the fork: %d entries, %v", len(log), err)
	}
	if _, _, err := b.AddSnapshot(ctx, append(rec1[:len(rec1):len(rec1)], ' ')); err == nil {
		t.Fatal("added a non-canonical record")
	}
}
