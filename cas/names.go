package cas

import (
	"bytes"
	"context"
	"fmt"
	"unicode/utf8"
)

// ValidateName enforces the Names rules on a name: non-empty, at most
// MaxNameLen bytes, valid UTF-8, no control characters (so no NUL). The
// error wraps ErrInvalidName.
func ValidateName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name: %w", ErrInvalidName)
	case len(name) > MaxNameLen:
		return fmt.Errorf("name of %d bytes exceeds %d: %w", len(name), MaxNameLen, ErrInvalidName)
	case !utf8.ValidString(name):
		return fmt.Errorf("name %q is not UTF-8: %w", truncate(name), ErrInvalidName)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return fmt.Errorf("name %q holds control character %U: %w", truncate(name), c, ErrInvalidName)
		}
	}
	return nil
}

// ValidateOps checks every op of a Names.Commit (its name, and its value
// against MaxNameValueSize), so that a store can refuse the commit before
// it applies anything.
func ValidateOps(ops []NameOp) error {
	for _, op := range ops {
		if err := ValidateName(op.Name); err != nil {
			return err
		}
		if len(op.Value) > MaxNameValueSize {
			return fmt.Errorf("name %q: value of %d bytes exceeds %d: %w",
				truncate(op.Name), len(op.Value), MaxNameValueSize, ErrTooLarge)
		}
	}
	return nil
}

// CheckExpect applies op.Expect to the current state of op.Name (present,
// holding cur): nil if the op may apply, else an error wrapping
// ErrConflict.
func (op NameOp) CheckExpect(present bool, cur []byte) error {
	if op.Expect == nil {
		return nil
	}
	want := *op.Expect
	switch {
	case want == nil && present:
		return fmt.Errorf("name %q: exists, expected absent: %w", truncate(op.Name), ErrConflict)
	case want != nil && !present:
		return fmt.Errorf("name %q: absent, expected a value: %w", truncate(op.Name), ErrConflict)
	case want != nil && !bytes.Equal(want, cur):
		return fmt.Errorf("name %q: holds another value: %w", truncate(op.Name), ErrConflict)
	}
	return nil
}

func nameNotFound(name string) error {
	return fmt.Errorf("name %q: %w", truncate(name), ErrNotFound)
}

// ctxErr returns ctx's error wrapped, so callers can test it with
// errors.Is(err, context.Canceled).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cas: %w", err)
	}
	return nil
}

func tooLarge(n int) error {
	return fmt.Errorf("chunk of %d bytes exceeds %d: %w", n, MaxChunkSize, ErrTooLarge)
}
