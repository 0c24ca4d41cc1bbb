package fork_test

import (
	"context"

	"homefs/cas"
	"homefs/fork/forktest"
	"homefs/manifest"
)

func forktestEdit(ctx context.Context, store cas.Store, root cas.Ref, p string, e *manifest.Entry) (cas.Ref, error) {
	return forktest.EditTree(ctx, store, root, p, true, func(*manifest.Entry) (*manifest.Entry, error) { return e, nil })
}
