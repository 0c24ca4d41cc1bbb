package suspect

import (
	"sync"
	"testing"
)

func TestSet(t *testing.T) {
	var s Set[int] // the zero value is ready
	if s.Has(1) {
		t.Fatal("empty set has 1")
	}
	s.Remove(1) // absent: no effect
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { s.Add(i) })
	}
	wg.Wait()
	for i := range 8 {
		if !s.Has(i) {
			t.Fatalf("%d added, not in the set", i)
		}
	}
	s.Remove(3)
	if s.Has(3) || !s.Has(4) {
		t.Fatal("Remove(3) took the wrong element")
	}
}
