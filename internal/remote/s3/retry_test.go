package s3

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"
)

// TestRetryable: which failures of one attempt are worth another.
func TestRetryable(t *testing.T) {
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"refused", context.Background(), refused, true},
		{"stalled", context.Background(), &net.OpError{Op: "read", Net: "tcp", Err: &stallError{idle: time.Second, cause: errors.New("i/o timeout")}}, true},
		{"attempt timed out", context.Background(), context.DeadlineExceeded, true},
		{"kept-alive connection closed by a restart", context.Background(), &url.Error{Op: "Put", URL: "http://127.0.0.1:1/b/k", Err: errors.New("http: server closed idle connection")}, true},
		{"caller canceled", canceled, refused, false},
		{"no such host", context.Background(), &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", IsNotFound: true}}, false},
		{"not ours", context.Background(), errors.New("signing failed"), false},
	} {
		if got := retryable(c.ctx, c.err); got != c.want {
			t.Errorf("%s: retryable = %v, want %v", c.name, got, c.want)
		}
	}
}
