// Package mockmessages is a local stand-in for the Anthropic Messages API
// (POST /v1/messages, streamed as server-sent events or not) so that agent
// CLIs that speak it, Claude Code and Pi, run offline in tests. The server
// records what it was asked.
//
// A reply is plain text unless the request offers a bash tool and the
// newest user text holds a line "mock-bash: COMMAND": then the reply is one
// call of that tool, and the request that carries its result gets the
// final text. The prompt drives the tool call, so the same prompt gives
// the same turn in every CLI and on every resume.
package mockmessages

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/homefs/homefs/internal/testkit/mockhttp"
)

// BashDirective starts a prompt line asking the mock for a bash tool call
// running the rest of the line.
const BashDirective = "mock-bash: "

// Request is one recorded call.
type Request = mockhttp.Request

// Reply is one assistant message: Text, or a call of tool Tool with Input.
type Reply struct {
	Text  string
	Tool  string
	Input map[string]any
}

// Server is a running mock. Its zero value is not usable; call Start.
type Server struct {
	// URL is the base URL to give the client (ANTHROPIC_BASE_URL, Pi's
	// baseUrl); requests go to URL + "/v1/messages".
	URL string

	// Reply, when set, answers the n-th (from 1) messages request instead
	// of the default described in the package comment.
	Reply func(n int, body map[string]any) Reply

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
	s.URL, s.srv = url, srv
	return s, nil
}

// Close stops the server.
func (s *Server) Close() error { return s.srv.Close() }

// Requests returns the requests so far.
func (s *Server) Requests() []Request { return s.rec.Requests() }

// Messages counts the messages requests served.
func (s *Server) Messages() int { return s.rec.Turns() }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	isMessages := r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages")
	body, n := s.rec.Record(r, isMessages)
	reply := s.Reply

	switch {
	case isMessages:
		var rep Reply
		if reply != nil {
			rep = reply(n, body)
		} else {
			rep = DefaultReply(n, body)
		}
		if stream, _ := body["stream"].(bool); stream {
			s.stream(w, n, body, rep)
		} else {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(message(n, body, rep))
		}
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/v1/messages/count_tokens"):
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"input_tokens":10}`)
	default:
		http.NotFound(w, r)
	}
}

// DefaultReply is the reply described in the package comment: "mock reply
// n", or a bash tool call the newest user text asks for.
func DefaultReply(n int, body map[string]any) Reply {
	text := fmt.Sprintf("mock reply %d", n)
	// The newest turn's message; Claude Code puts its environment in a
	// "system" message after it.
	var last map[string]any
	msgs, _ := body["messages"].([]any)
	for i := len(msgs) - 1; i >= 0 && last == nil; i-- {
		m, _ := msgs[i].(map[string]any)
		if m["role"] == "user" || m["role"] == "assistant" {
			last = m
		}
	}
	if last["role"] != "user" {
		return Reply{Text: text}
	}
	var texts []string
	switch c := last["content"].(type) {
	case string:
		texts = append(texts, c)
	case []any:
		for _, b := range c {
			block, _ := b.(map[string]any)
			switch block["type"] {
			case "tool_result":
				return Reply{Text: text} // the tool ran: finish the turn
			case "text":
				t, _ := block["text"].(string)
				texts = append(texts, t)
			}
		}
	}
	tool := bashTool(body)
	if tool == "" {
		return Reply{Text: text}
	}
	for _, t := range texts {
		for _, line := range strings.Split(t, "\n") {
			if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), BashDirective); ok {
				return Reply{Tool: tool, Input: map[string]any{"command": cmd}}
			}
		}
	}
	return Reply{Text: text}
}

// bashTool returns the name of the bash tool the request offers: "Bash"
// in Claude Code, "bash" in Pi.
func bashTool(body map[string]any) string {
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		tool, _ := t.(map[string]any)
		if name, _ := tool["name"].(string); strings.EqualFold(name, "bash") {
			return name
		}
	}
	return ""
}

func model(body map[string]any) string {
	if m, ok := body["model"].(string); ok && m != "" {
		return m
	}
	return "mock-model"
}

var usage = map[string]any{
	"input_tokens": 10, "output_tokens": 5,
	"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
}

// block is the content block of rep.
func block(n int, rep Reply) (map[string]any, string) {
	if rep.Tool != "" {
		return map[string]any{
			"type": "tool_use", "id": fmt.Sprintf("toolu_mock_%d", n),
			"name": rep.Tool, "input": rep.Input,
		}, "tool_use"
	}
	return map[string]any{"type": "text", "text": rep.Text}, "end_turn"
}

// message is the non-streamed response.
func message(n int, body map[string]any, rep Reply) map[string]any {
	b, stop := block(n, rep)
	return map[string]any{
		"id": fmt.Sprintf("msg_mock_%d", n), "type": "message", "role": "assistant",
		"model": model(body), "content": []any{b},
		"stop_reason": stop, "stop_sequence": nil, "usage": usage,
	}
}

// stream writes one response as SSE: message_start, one content block
// (text, or tool_use with its input as one JSON delta), message_delta,
// message_stop.
func (s *Server) stream(w http.ResponseWriter, n int, body map[string]any, rep Reply) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	b, stop := block(n, rep)
	var start, delta map[string]any
	if rep.Tool != "" {
		start = map[string]any{"type": "tool_use", "id": b["id"], "name": b["name"], "input": map[string]any{}}
		in, _ := json.Marshal(rep.Input)
		delta = map[string]any{"type": "input_json_delta", "partial_json": string(in)}
	} else {
		start = map[string]any{"type": "text", "text": ""}
		delta = map[string]any{"type": "text_delta", "text": rep.Text}
	}
	events := []map[string]any{
		{"type": "message_start", "message": map[string]any{
			"id": fmt.Sprintf("msg_mock_%d", n), "type": "message", "role": "assistant",
			"model": model(body), "content": []any{},
			"stop_reason": nil, "stop_sequence": nil, "usage": usage,
		}},
		{"type": "content_block_start", "index": 0, "content_block": start},
		{"type": "content_block_delta", "index": 0, "delta": delta},
		{"type": "content_block_stop", "index": 0},
		{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
			"usage": map[string]any{"output_tokens": 5}},
		{"type": "message_stop"},
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
