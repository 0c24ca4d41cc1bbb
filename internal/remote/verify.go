package remote

import (
	"context"
	"errors"

	"github.com/homefs/homefs/cas"
)

// readBack is what reading one object back from the remote found.
type readBack struct {
	data []byte // its plain bytes, when asked for and intact
	size int    // its plain length, when intact
	// bad is the damage: missing (wraps cas.ErrNotFound) or damaged
	// (cas.ErrCorrupt); nil when the object is intact.
	bad error
}

// readBackAll reads refs back from the remote, Parallel at a time, each
// through GetChunk: decoded and re-hashed as a pull and a lazy read check
// it. A missing or damaged object is reported in its slot; any other
// failure (the remote does not answer) fails the call, since it says
// nothing about the object. keep(i) says whose bytes to return (nil:
// none).
func (r *Remote) readBackAll(ctx context.Context, refs []cas.Ref, keep func(i int) bool) ([]readBack, error) {
	out := make([]readBack, len(refs))
	err := parallel(ctx, r.parallel, len(refs), func(ctx context.Context, i int) error {
		data, err := r.GetChunk(ctx, refs[i])
		switch {
		case isDamage(err):
			out[i].bad = err
		case err != nil:
			return err
		default:
			out[i].size = len(data)
			if keep != nil && keep(i) {
				out[i].data = data
			}
		}
		return nil
	})
	return out, err
}

// isDamage reports an object that is missing or whose bytes do not check:
// what fsck reports and a repair uploads again.
func isDamage(err error) bool {
	return errors.Is(err, cas.ErrNotFound) || errors.Is(err, cas.ErrCorrupt)
}

// Damage states of an object (ObjectProblem.State).
const (
	StateMissing = "missing"
	StateDamaged = "damaged"
)

func damageState(err error) string {
	if errors.Is(err, cas.ErrNotFound) {
		return StateMissing
	}
	return StateDamaged
}
