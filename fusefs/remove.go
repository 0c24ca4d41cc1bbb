package fusefs

import (
	"context"
	"fmt"
	"os"
)

// RemoveSession deletes session name: its head goes, its snapshots stay.
// It fails with ErrSessionInUse while any mount shows the session; the
// live state of an unmounted session (changes not yet flushed) is dropped
// with it, so that a later session of the same name starts clean.
func (e *Engine) RemoveSession(ctx context.Context, name string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.mounts {
		if m.sess.name == name && !m.sess.readOnly {
			return fmt.Errorf("remove %s: mounted at %s: %w", name, m.dir, ErrSessionInUse)
		}
	}
	if err := e.cat.DeleteSession(ctx, name); err != nil {
		return err
	}
	if s, ok := e.sessions[name]; ok {
		s.closeBackings()
		if s.journal != nil {
			s.journal.close()
		}
	}
	if e.storeDir != "" {
		os.Remove(journalPath(e.storeDir, name))
	}
	delete(e.sessions, name)
	return nil
}
