package remote

import (
	"context"
	"sync"
)

// parallel runs fn(ctx, i) for i in [0, n) with at most width calls in
// flight. The first error cancels the others' context and is returned.
func parallel(ctx context.Context, width, n int, fn func(ctx context.Context, i int) error) error {
	if n == 0 {
		return ctx.Err()
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if width > n {
		width = n
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
	)
	for range width {
		wg.Go(func() {
			for {
				if ctx.Err() != nil {
					return
				}
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return err
	}
	return nil
}
