package s3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/homefs/homefs/internal/remote/objstore"
)

// stallError is the Err of the *net.OpError of a connection that moved
// no byte for Timeouts.Idle: a timeout that says which.
type stallError struct {
	idle  time.Duration
	cause error
}

func (e *stallError) Error() string {
	return fmt.Sprintf("%v for %v: the remote does not answer", objstore.ErrStalled, e.idle)
}
func (e *stallError) Unwrap() []error { return []error{objstore.ErrStalled, e.cause} }
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

// newHTTPClient returns the client every request of a Store goes
// through. It is a plain *http.Client, not the SDK's buildable one, so the
// SDK applies none of its own timeouts over these.
func newHTTPClient(t objstore.Timeouts, parallel int) *http.Client {
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
