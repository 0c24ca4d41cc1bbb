package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/homefs/homefs/internal/remote/objstore"
)

// baseDelay is the first backoff; each retry doubles it up to MaxBackoff.
const baseDelay = 100 * time.Millisecond

// do runs one request: attempt, under a context bounded by
// Timeouts.Request, and again after each transient failure until
// Timeouts.RetryTotal has passed since the first attempt (or MaxAttempts
// are spent). The retries are ours, not the SDK's: its retry quota, shared
// by every request of a client, ran out in seconds when a server restarted
// under 16 requests in flight.
func (s *Store) do(ctx context.Context, what string, attempt func(ctx context.Context) error) error {
	start := time.Now()
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, s.timeouts.Request)
		err := unwrapSend(attempt(actx))
		cancel()
		if err == nil || !retryable(ctx, err) {
			return err
		}
		delay := backoff(n, s.maxBackoff)
		if s.timeouts.RetryTotal < 0 || (s.maxAttempts > 0 && n >= s.maxAttempts) || time.Since(start)+delay > s.timeouts.RetryTotal {
			return &gaveUp{err: err, attempts: n, after: time.Since(start).Round(time.Millisecond)}
		}
		s.log.Debug("remote request failed: retrying", "remote", s.name, "request", what, "attempt", n, "delay", delay, "err", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (while retrying: %v)", ctx.Err(), err)
		}
	}
}

// gaveUp is the error of a request whose last attempt failed
// transiently: that attempt's error, and objstore.ErrUnavailable.
type gaveUp struct {
	err      error
	attempts int
	after    time.Duration
}

func (e *gaveUp) Error() string {
	return fmt.Sprintf("%v (gave up after %d attempts in %v)", e.err, e.attempts, e.after)
}
func (e *gaveUp) Unwrap() []error { return []error{e.err, objstore.ErrUnavailable} }

// unwrapSend returns the transport's own error for a request that got no
// answer: the SDK's wrapping of it (operation name, a response error of
// status 0, "request send failed") only hides the cause.
func unwrapSend(err error) error {
	var send *smithyhttp.RequestSendError
	if errors.As(err, &send) && send.Err != nil {
		return send.Err
	}
	return err
}

// backoff is the wait before attempt n+1: exponential, capped at limit,
// with the upper half jittered so that requests failed together (a server
// restart) do not come back together.
func backoff(n int, limit time.Duration) time.Duration {
	d := limit
	if n < 30 {
		d = min(baseDelay<<(n-1), limit)
	}
	return d/2 + rand.N(d/2+1)
}

// retryable reports whether err, from one attempt of a request made under
// ctx, may pass on a later attempt: the server answered with a transient
// failure, or no answer came (refused, reset, cut, timed out). A canceled
// ctx never retries.
func retryable(ctx context.Context, err error) bool {
	if err == nil || ctx.Err() != nil {
		return false
	}
	// The SDK wraps a request that got no answer in a ResponseError of
	// status 0.
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() != 0 {
		if _, ok := retry.DefaultRetryableHTTPStatusCodes[re.HTTPStatusCode()]; ok {
			return true
		}
		switch re.HTTPStatusCode() {
		case http.StatusTooManyRequests, http.StatusRequestTimeout, http.StatusServiceUnavailable:
			return true
		}
		var ae smithy.APIError
		if errors.As(err, &ae) {
			_, transient := retry.DefaultRetryableErrorCodes[ae.ErrorCode()]
			_, throttled := retry.DefaultThrottleErrorCodes[ae.ErrorCode()]
			return transient || throttled
		}
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsTimeout || dnsErr.IsTemporary
	}
	var opErr *net.OpError
	var netErr net.Error
	return errors.As(err, &opErr) || closedIdle(err) ||
		(errors.As(err, &netErr) && netErr.Timeout()) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) // the attempt's own timeout
}

// closedIdle reports net/http's error for a request sent on a kept-alive
// connection that the server closed meanwhile (a gateway that restarted
// between two requests). net/http retries it itself only for requests it
// can replay, and its value is unexported: its text is all there is.
func closedIdle(err error) bool {
	return strings.Contains(err.Error(), "http: server closed idle connection")
}
