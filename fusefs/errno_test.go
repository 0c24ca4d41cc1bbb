package fusefs

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"syscall"
	"testing"

	"github.com/homefs/homefs/cas"
)

func TestToErrno(t *testing.T) {
	m := &Mount{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"posix outcome", fmt.Errorf("unlink: %w", syscall.ENOTEMPTY), syscall.ENOTEMPTY},
		{"interrupted", fmt.Errorf("read: %w", context.Canceled), syscall.EINTR},
		{"remote refused", fmt.Errorf("remote: fetch: %w", refused), syscall.EIO},
		{"remote timed out", fmt.Errorf("remote: fetch: %w", &net.OpError{Op: "read", Err: os.ErrDeadlineExceeded}), syscall.EIO},
		{"deadline", fmt.Errorf("fetch: %w", context.DeadlineExceeded), syscall.EIO},
		{"corrupt", fmt.Errorf("chunk: %w", cas.ErrCorrupt), syscall.EIO},
		{"http client", &url.Error{Op: "Get", URL: "http://s3", Err: refused}, syscall.EIO},
		{"dns", &net.DNSError{Err: "no such host", Name: "s3"}, syscall.EIO},
	} {
		if got := m.toErrno("read", nil, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
