// Package mockhttp is what the model mocks (mockresponses, mockmessages)
// share: a server on a free loopback port that records every request's
// method, path and JSON body and counts the calls to the one endpoint that
// answers model turns.
package mockhttp

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
)

// Request is one recorded call.
type Request struct {
	Method, Path string
	Body         map[string]any
}

// Recorder records requests. Its zero value is ready to use.
type Recorder struct {
	mu       sync.Mutex
	requests []Request // GUARDED_BY(mu)
	served   int       // turns so far; GUARDED_BY(mu)
}

// Record reads and records r; when turn is true it counts a turn and
// returns its number (from 1), else 0. A body that is not JSON is recorded
// as nil.
func (c *Recorder) Record(r *http.Request, turn bool) (body map[string]any, n int) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	_ = json.Unmarshal(raw, &body)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.requests = append(c.requests, Request{Method: r.Method, Path: r.URL.Path, Body: body})
	if turn {
		c.served++
		n = c.served
	}
	return body, n
}

// Requests returns the requests so far.
func (c *Recorder) Requests() []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.requests...)
}

// Turns counts the turns served.
func (c *Recorder) Turns() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.served
}

// Serve serves h on a free port of 127.0.0.1 and returns its base URL
// ("http://127.0.0.1:PORT") and the server, which Close stops.
func Serve(h http.Handler) (string, *http.Server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), srv, nil
}
