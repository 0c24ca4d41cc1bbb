// Package suspect keeps the set of chunks whose stored form failed
// verification, for the stores of package cas and its subpackages: a later
// Put of the same content rewrites such a chunk instead of deduplicating
// against the damaged copy.
package suspect

import "sync"

// Set is a set of refs, safe for concurrent use. The zero value is empty
// and ready to use.
type Set[K comparable] struct {
	mu  sync.Mutex
	set map[K]struct{} // GUARDED_BY(mu)
}

// Add puts r in the set.
func (s *Set[K]) Add(r K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.set == nil {
		s.set = make(map[K]struct{})
	}
	s.set[r] = struct{}{}
}

// Has reports whether r is in the set.
func (s *Set[K]) Has(r K) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.set[r]
	return ok
}

// Remove takes r out of the set.
func (s *Set[K]) Remove(r K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.set, r)
}
