package api

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/remote"
)

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want Code
	}{
		{fmt.Errorf("get: %w", cas.ErrNotFound), CodeCorrupt},
		// A bad prefix wraps no-snapshot too: it is a usage error.
		{fmt.Errorf("log: %w", catalog.ErrBadPrefix), CodeUsage},
		{fmt.Errorf("log: %w", catalog.ErrNoSnapshot), CodeNotFound},
		{fmt.Errorf("open: %w", fs.ErrNotExist), CodeNotFound},
		{fmt.Errorf("push: %w", remote.ErrLeased), CodeConflict},
		{fmt.Errorf("write: %w", syscall.ENOSPC), CodeNoSpace},
		{fmt.Errorf("call: %w", &Error{Code: CodePermission, Message: "no"}), CodePermission},
		{errors.New("something else"), CodeInternal},
	} {
		if got := Classify(tc.err); got != tc.want {
			t.Errorf("Classify(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// errors.Is matches an *Error by its code alone.
func TestErrorIsByCode(t *testing.T) {
	err := fmt.Errorf("mount: %w", &Error{Code: CodeNotFound, Message: "no such session"})
	if !errors.Is(err, &Error{Code: CodeNotFound}) {
		t.Error("an error of code not_found does not match &Error{Code: CodeNotFound}")
	}
	if errors.Is(err, &Error{Code: CodeConflict}) {
		t.Error("an error of code not_found matches &Error{Code: CodeConflict}")
	}
}
