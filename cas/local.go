package cas

import (
	"context"
	"errors"
)

// ErrNotLocal is what a Get under LocalOnly answers for a chunk missing
// (or damaged) in the local store, which only a remote could give.
var ErrNotLocal = errors.New("cas: not in the local store")

type localOnlyKey struct{}

// LocalOnly returns a context under which a store that can fetch a chunk
// from elsewhere (remote.ReadThrough) serves only what it holds locally,
// and answers ErrNotLocal for the rest instead of waiting for a remote.
// A store that holds everything locally ignores it. A caller that must not
// wait for a network (a FUSE ring thread) tries so first, and hands the
// request to a goroutine that may wait when it gets ErrNotLocal.
func LocalOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, localOnlyKey{}, true)
}

// IsLocalOnly reports whether ctx came from LocalOnly.
func IsLocalOnly(ctx context.Context) bool {
	v, _ := ctx.Value(localOnlyKey{}).(bool)
	return v
}
