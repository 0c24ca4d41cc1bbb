package fork

import "errors"

// Sentinel errors, tested with errors.Is; returned errors wrap them with
// what was being done and where.
var (
	// ErrUnknownProvider: a provider name the registry does not hold.
	ErrUnknownProvider = errors.New("fork: unknown provider")
	// ErrInvalid: a request that breaks a rule before anything is read
	// (same session twice, empty id, …).
	ErrInvalid = errors.New("fork: invalid request")
	// ErrNotFound: no rollout of that provider session in the source (or an
	// ancestor of it missing).
	ErrNotFound = errors.New("fork: rollout not found")
	// ErrAmbiguous: more than one rollout carries the id.
	ErrAmbiguous = errors.New("fork: more than one rollout for the id")
	// ErrDamaged: a rollout with a line that is not a JSON object, where
	// that is not tolerated (a source, or a target whose identity cannot be
	// read).
	ErrDamaged = errors.New("fork: damaged rollout")
	// ErrDiverged: the target holds a rollout for the id that is neither a
	// prefix nor an extension of the source's. Nothing was changed.
	ErrDiverged = errors.New("fork: target rollout diverges from the source")
	// ErrConflict: the target changed between planning and placing the
	// entry, or the placed entry did not verify. Bind retries a few times
	// before returning it; retrying later is safe.
	ErrConflict = errors.New("fork: target changed concurrently")
	// ErrTooLarge: a line or a native snapshot over one of the limits.
	ErrTooLarge = errors.New("fork: too large")
	// ErrNative: a native snapshot or blob directory that breaks a rule of
	// the format.
	ErrNative = errors.New("fork: invalid native snapshot")
)

func isDamaged(err error) bool { return errors.Is(err, ErrDamaged) }
