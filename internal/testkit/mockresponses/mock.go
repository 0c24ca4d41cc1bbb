// Package mockresponses is a local stand-in for the OpenAI Responses API
// (POST /v1/responses, streamed as server-sent events) so that agent CLIs
// such as Codex run offline in tests. Each request gets one assistant
// message; the server records what it was asked.
package mockresponses

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/homefs/homefs/internal/testkit/mockhttp"
)

// Request is one recorded call.
type Request = mockhttp.Request

// Server is a running mock. Its zero value is not usable; call Start.
type Server struct {
	// URL is the base URL to give the client, ending in /v1.
	URL string

	// Reply, when set, returns the assistant text for the n-th (from 1)
	// responses request; the default is "mock reply n".
	Reply func(n int, body map[string]any) string

	srv *http.Server
	rec mockhttp.Recorder
}

// Start listens on 127.0.0.1 on a free port.
func Start() (*Server, error) {
	s := &Server{}
	url, srv, err := mockhttp.Serve(http.HandlerFunc(s.serve))
	if err != nil {
		return nil, err
	}
	s.URL, s.srv = url+"/v1", srv
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Requests returns the requests so far.
func (s *Server) Requests() []Request { return s.rec.Requests() }

// Responses counts the responses requests served.
func (s *Server) Responses() int { return s.rec.Turns() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	isResponses := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/responses")
	body, n := s.rec.Record(r, isResponses)
	reply := s.Reply

	switch {
	case isResponses:
		text := fmt.Sprintf("mock reply %d", n)
		if reply != nil {
			text = reply(n, body)
		}
		s.stream(w, n, text)
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/models"):
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"object":"list","data":[],"models":[]}`)
	default:
		http.NotFound(w, r)
	}
}

// stream writes one response as SSE: created, the assistant message as an
// output item, completed.
func (s *Server) stream(w http.ResponseWriter, n int, text string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	id := fmt.Sprintf("resp_mock_%d", n)
	msg := map[string]any{
		"type": "message", "role": "assistant", "id": fmt.Sprintf("msg_mock_%d", n), "status": "completed",
		"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}},
	}
	events := []map[string]any{
		{"type": "response.created", "response": map[string]any{"id": id}},
		{"type": "response.output_item.added", "output_index": 0, "item": msg},
		{"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "item_id": msg["id"], "delta": text},
		{"type": "response.output_item.done", "output_index": 0, "item": msg},
		{"type": "response.completed", "response": map[string]any{
			"id": id,
			"usage": map[string]any{
				"input_tokens": 10, "input_tokens_details": map[string]any{"cached_tokens": 0},
				"output_tokens": 5, "output_tokens_details": map[string]any{"reasoning_tokens": 0},
				"total_tokens": 15,
			},
		}},
	}
	f, _ := w.(http.Flusher)
	for _, ev := range events {
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev["type"], b)
		if f != nil {
			f.Flush()
		}
	}
}
