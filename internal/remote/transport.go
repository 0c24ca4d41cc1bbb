package remote

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"
)

// Timeouts bound every wait on a remote. The zero value means the
// defaults; a negative RetryTotal turns retries off.
type Timeouts struct {
	// Connect bounds a TCP connect and a TLS handshake; 0 means 10s.
	Connect time.Duration
	// Idle bounds how long a connection with a request on it may move no
	// byte in either direction (a server that accepts and never answers,
	// one frozen mid-body); 0 means 20s.
	Idle time.Duration
	// Request bounds one attempt of one request, body included; 0 means
	// 2m.
	Request time.Duration
	// RetryTotal is how long after a request's first attempt transient
	// failures (connection refused or reset, timeouts, 5xx, throttling)
	// are retried, with jittered exponential backoff; 0 means 60s, long
	// enough to ride out a server restart.
	RetryTotal time.Duration
}

// Default timeouts.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultIdleTimeout    = 20 * time.Second
	DefaultRequestTimeout = 2 * time.Minute
	DefaultRetryTotal     = 60 * time.Second
)

// withDefaults fills the zero fields.
func (t Timeouts) withDefaults() Timeouts {
	if t.Connect <= 0 {
		t.Connect = DefaultConnectTimeout
	}
	if t.Idle <= 0 {
		t.Idle = DefaultIdleTimeout
	}
	if t.Request <= 0 {
		t.Request = DefaultRequestTimeout
	}
	if t.RetryTotal == 0 {
		t.RetryTotal = DefaultRetryTotal
	}
	return t
}

// ErrStalled is wrapped by the error of a connection that moved no byte for
// Timeouts.Idle while a request was on it. The error is a *net.OpError (a
// network failure to whoever maps errors: EIO in fusefs).
var ErrStalled = errors.New("no byte moved")

// stallError is the Err of such a *net.OpError: a timeout that says which.
type stallError struct {
	idle  time.Duration
	cause error
}

func (e *stallError) Error() string {
	return fmt.Sprintf("%v for %v: the remote does not answer", ErrStalled, e.idle)
}
func (e *stallError) Unwrap() []error { return []error{ErrStalled, e.cause} }
func (e *stallError) Timeout() bool   { return true }
func (e *stallError) Temporary() bool { return true }

// idleConn fails a read or write once the connection has moved nothing for
// idle. Every write pushes the read deadline too: a request just written
// gives its response the whole window, even on a connection whose read
// (the transport's watch for the server closing it) started long before.
type idleConn struct {
	net.Conn
	idle time.Duration
}

func (c *idleConn) Read(p []byte) (int, error) {
	if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(p)
	return n, c.stalled(err)
}

func (c *idleConn) Write(p []byte) (int, error) {
	d := time.Now().Add(c.idle)
	if err := c.Conn.SetDeadline(d); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(p)
	return n, c.stalled(err)
}

func (c *idleConn) stalled(err error) error {
	var op *net.OpError
	if errors.Is(err, os.ErrDeadlineExceeded) && errors.As(err, &op) {
		cp := *op
		cp.Err = &stallError{idle: c.idle, cause: op.Err}
		return &cp
	}
	return err
}

// newHTTPClient returns the client every request of a Remote goes
// through. It is a plain *http.Client, not the SDK's buildable one, so the
// SDK applies none of its own timeouts over these.
func newHTTPClient(t Timeouts, parallel int) *http.Client {
	dialer := &net.Dialer{Timeout: t.Connect, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &idleConn{Conn: c, idle: t.Idle}, nil
		},
		TLSHandshakeTimeout:   t.Connect,
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost:   2 * parallel,
		ExpectContinueTimeout: time.Second,
		// A pooled connection is closed before its idle read deadline
		// could fail it, so that one taken from the pool has the window
		// left.
		IdleConnTimeout: min(t.Idle/2, 90*time.Second),
	}
	return &http.Client{
		Transport: tr,
		// S3 answers a wrong region or endpoint with a redirect; the error
		// says so, following it would not.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}
