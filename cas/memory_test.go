package cas_test

import (
	"context"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/castest"
)

func TestMemoryConformance(t *testing.T) {
	castest.Run(t, func(t *testing.T) cas.Store { return cas.NewMemory() })
}

func TestMemoryZeroValue(t *testing.T) {
	castest.Run(t, func(t *testing.T) cas.Store { return new(cas.MemoryStore) })
	var m cas.MemoryStore // not even through a pointer from NewMemory
	ctx := context.Background()
	if _, err := m.GetName(ctx, "x"); err == nil {
		t.Fatal("GetName on an empty zero store succeeded")
	}
	ref, err := m.Put(ctx, []byte("data"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Get(ctx, ref); err != nil {
		t.Fatal(err)
	}
}
