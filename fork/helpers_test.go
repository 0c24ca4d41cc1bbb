package fork_test

import (
	"context"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork/forktest"
	"github.com/homefs/homefs/manifest"
)

func forktestEdit(ctx context.Context, store cas.Store, root cas.Ref, p string, e *manifest.Entry) (cas.Ref, error) {
	return forktest.EditTree(ctx, store, root, p, true, func(*manifest.Entry) (*manifest.Entry, error) { return e, nil })
}
