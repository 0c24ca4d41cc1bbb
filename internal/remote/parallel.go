package remote

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// parallel runs fn(ctx, i) for i in [0, n) with at most width calls in
// flight. The first error cancels the others' context and is returned;
// no call starts after it.
func parallel(ctx context.Context, width, n int, fn func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(width, 1))
	for i := 0; i < n && gctx.Err() == nil; i++ {
		g.Go(func() error { return fn(gctx, i) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}
