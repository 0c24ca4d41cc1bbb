package badgerstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/homefs/homefs/cas"
)

var (
	// ErrLocked: another process (or another open Store in this process)
	// holds the store directory.
	ErrLocked    = errors.New("cas: store directory is in use by another process")
	errBatchDone = errors.New("cas: batch already committed or discarded")
)

// ctxErr returns ctx's error wrapped, so callers can test it with
// errors.Is(err, context.Canceled).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cas: %w", err)
	}
	return nil
}

func tooLarge(n int) error {
	return fmt.Errorf("chunk of %d bytes exceeds %d: %w", n, cas.MaxChunkSize, cas.ErrTooLarge)
}

// verifySum checks that sum, the hash of a chunk read as ref, is ref.
func verifySum(ref, sum cas.Ref) error {
	if sum != ref {
		return fmt.Errorf("chunk %s: content hashes to %s: %w", ref.Short(), sum.Short(), cas.ErrCorrupt)
	}
	return nil
}

// corruptErr wraps a decoding failure of ref's stored form.
func corruptErr(ref cas.Ref, err error) error {
	return fmt.Errorf("chunk %s: %w: %v", ref.Short(), cas.ErrCorrupt, err)
}

func nameNotFound(name string) error {
	return fmt.Errorf("name %q: %w", truncate(name), cas.ErrNotFound)
}

// truncate shortens a name for an error message.
func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
