package fusefs

import (
	"context"
	"fmt"
	"os"

	"github.com/homefs/homefs/internal/catalog"
)

// RemoveSession deletes session name: its head goes, its snapshots stay.
// It fails with ErrSessionInUse while any mount shows the session; the
// live state of an unmounted session (changes not yet flushed) is dropped
// with it, so that a later session of the same name starts clean.
func (e *Engine) RemoveSession(ctx context.Context, name string) error {
	return e.removeSession(ctx, name, func() error { return e.cat.DeleteSession(ctx, name) })
}

// PurgeSession is RemoveSession that also forgets every snapshot of the
// session (catalog.Purge), refusing those in protect; it returns the ids
// forgotten. gc then frees what they alone reached.
func (e *Engine) PurgeSession(ctx context.Context, name string, protect catalog.Protect) ([]string, error) {
	var ids []string
	err := e.removeSession(ctx, name, func() error {
		var err error
		ids, err = e.cat.Purge(ctx, name, protect)
		return err
	})
	return ids, err
}

func (e *Engine) removeSession(ctx context.Context, name string, del func() error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, m := range e.mounts {
		if m.sess.name == name && !m.sess.readOnly {
			return fmt.Errorf("remove %s: mounted at %s: %w", name, m.dir, ErrSessionInUse)
		}
	}
	if err := del(); err != nil {
		return err
	}
	if s, ok := e.sessions[name]; ok {
		s.closeBackings(true, true) // the session and its journal are gone
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
