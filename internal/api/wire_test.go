package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serve runs handler behind a net/http server on a Unix socket, as the
// daemon does, and returns a client for it.
func serve(t *testing.T, handler http.Handler) *Client {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return NewClient(sock)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// Answers framed by Content-Length (small) and by chunks (one too large
// for the server's buffer), and errors as JSON and as plain text.
func TestClientAnswers(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	cl := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			var in map[string]string
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil || r.Header.Get("Content-Type") != "application/json" {
				http.Error(w, "bad body", 400)
				return
			}
			writeJSON(w, map[string]string{"echo": in["a"], "q": r.URL.Query().Get("q"), "method": r.Method})
		case "/big":
			writeJSON(w, map[string]string{"big": big})
		case "/err":
			w.WriteHeader(http.StatusConflict)
			writeJSON(w, Error{Code: CodeConflict, Message: "busy"})
		default:
			http.NotFound(w, r)
		}
	}))
	ctx := context.Background()
	var out map[string]string
	if err := cl.call(ctx, "POST", "/small", map[string][]string{"q": {"a b&c"}}, map[string]string{"a": "é"}, &out); err != nil {
		t.Fatal(err)
	}
	if out["echo"] != "é" || out["q"] != "a b&c" || out["method"] != "POST" {
		t.Fatalf("answer %v", out)
	}
	if err := cl.call(ctx, "GET", "/big", nil, nil, &out); err != nil || out["big"] != big {
		t.Fatalf("big answer: %d bytes, %v", len(out["big"]), err)
	}
	err := cl.call(ctx, "GET", "/err", nil, nil, nil)
	if !errors.Is(err, &Error{Code: CodeConflict}) || err.Error() != "busy" {
		t.Fatalf("error %v, want the daemon's conflict", err)
	}
	err = cl.call(ctx, "GET", "/nowhere", nil, nil, nil)
	var de *Error
	if !errors.As(err, &de) || de.Code != CodeInternal || !strings.Contains(de.Message, "404 Not Found: 404 page not found") {
		t.Fatalf("error %v, want the plain text answer", err)
	}
}

// A stream of progress lines flushed one by one arrives line by line,
// before the stream ends; an error line ends it with the daemon's error.
func TestClientStream(t *testing.T) {
	next := make(chan struct{})
	cl := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		enc := json.NewEncoder(w)
		for i := int64(1); i <= 3; i++ {
			_ = enc.Encode(map[string]any{"progress": Progress{Phase: "p", Done: i}})
			w.(http.Flusher).Flush()
			<-next
		}
		if r.URL.Path == "/fail" {
			_ = enc.Encode(map[string]any{"error": Error{Code: CodeCorrupt, Message: "damaged"}})
			return
		}
		_ = enc.Encode(map[string]any{"result": map[string]int{"n": 3}})
	}))
	var got []int64
	var out struct{ N int }
	err := cl.streamCall(context.Background(), "/ok", nil, func(p Progress) {
		got = append(got, p.Done)
		next <- struct{}{} // the server sends the next line only now
	}, &out)
	if err != nil || out.N != 3 || fmt.Sprint(got) != "[1 2 3]" {
		t.Fatalf("stream: progress %v, result %+v, %v", got, out, err)
	}
	err = cl.streamCall(context.Background(), "/fail", nil, func(Progress) { next <- struct{}{} }, &out)
	if !errors.Is(err, &Error{Code: CodeCorrupt}) {
		t.Fatalf("stream error %v, want corrupt", err)
	}
}

// Export's tar arrives whole; an error after it began comes in the
// trailer.
func TestClientExportTrailer(t *testing.T) {
	data := bytes.Repeat([]byte("tar!"), 50<<10)
	cl := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", ErrorTrailer)
		_, _ = w.Write(data)
		if r.URL.Query().Get("snapshot") == "bad" {
			// A message longer than the client's read buffer.
			b, _ := json.Marshal(Error{Code: CodeCorrupt, Message: "chunk missing: " + strings.Repeat("x", 20<<10)})
			w.Header().Set(ErrorTrailer, string(b))
		}
	}))
	var buf bytes.Buffer
	if err := cl.Export(context.Background(), "good", &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("export: %d bytes, %v", buf.Len(), err)
	}
	buf.Reset()
	err := cl.Export(context.Background(), "bad", &buf)
	if !errors.Is(err, &Error{Code: CodeCorrupt}) || len(err.Error()) < 20<<10 || buf.Len() != len(data) {
		t.Fatalf("export with a trailer: %v after %d bytes, want corrupt after %d", err, buf.Len(), len(data))
	}
}

// A body of unknown length goes chunked and arrives whole; one that
// fails aborts the request with the body's error.
func TestClientChunkedRequest(t *testing.T) {
	cl := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			return
		}
		writeJSON(w, ImportResult{Bytes: n, Session: strings.Join(r.TransferEncoding, ",")})
	}))
	body := io.MultiReader(strings.NewReader(strings.Repeat("y", 300<<10)), strings.NewReader("z"))
	res, err := cl.Import(context.Background(), "s", body, false)
	if err != nil || res.Bytes != 300<<10+1 || res.Session != "chunked" {
		t.Fatalf("import: %+v, %v", res, err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte("some"))
		pw.CloseWithError(errors.New("disk on fire"))
	}()
	if _, err := cl.Import(context.Background(), "s", pr, false); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("import of a failing body: %v, want its error", err)
	}
}

// A run's hold is full duplex: the answer's first line comes while the
// body is open, and the answer ends when the body does.
func TestClientRunHold(t *testing.T) {
	ended := make(chan struct{})
	cl := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := http.NewResponseController(w).EnableFullDuplex(); err != nil {
			t.Error(err)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"result": RunMountInfo{Dir: "/m"}})
		w.(http.Flusher).Flush()
		_, _ = io.Copy(io.Discard, r.Body)
		close(ended)
	}))
	hold, err := cl.RunMount(context.Background(), "s", "")
	if err != nil || hold.Dir != "/m" {
		t.Fatalf("run: %+v, %v", hold, err)
	}
	select {
	case <-ended:
		t.Fatal("the hold ended before Release")
	case <-hold.Lost:
		t.Fatal("hold lost")
	case <-time.After(100 * time.Millisecond):
	}
	hold.Release()
	<-ended
	select {
	case <-hold.Lost:
		t.Fatal("a released hold reported lost")
	default:
	}
}

// A daemon that stops mid-answer: in the head, the answer is
// unavailable; in a chunked body, the body's read fails; a hold is lost.
func TestClientServerClosesEarly(t *testing.T) {
	cl := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		switch r.URL.Path {
		case "/head":
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Ty")
		case "/body":
			bw.WriteString("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{\"progress\":{}}\n\r\n")
		case "/length":
			bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"n\":")
		}
		bw.Flush()
	}))
	ctx := context.Background()
	err := cl.call(ctx, "GET", "/head", nil, nil, nil)
	if !errors.Is(err, &Error{Code: CodeUnavailable}) {
		t.Fatalf("cut in the head: %v, want unavailable", err)
	}
	var out struct{ N int }
	err = cl.streamCall(ctx, "/body", nil, nil, &out)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("cut in a stream: %v, want unexpected EOF", err)
	}
	if err := cl.call(ctx, "GET", "/length", nil, nil, &out); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short body: %v, want unexpected EOF", err)
	}
}

// Ending the context ends a request waiting for its answer, and a stream
// that is being read, with the context's error.
func TestClientCancel(t *testing.T) {
	cl := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/stream" {
			_ = json.NewEncoder(w).Encode(map[string]any{"progress": Progress{Done: 1}})
			w.(http.Flusher).Flush()
		}
		<-r.Context().Done()
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := cl.call(ctx, "GET", "/wait", nil, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("waiting answer: %v, want the deadline", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	err := cl.streamCall(ctx, "/stream", nil, func(Progress) { cancel() }, nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("stream: %v, want canceled", err)
	}
}

// No daemon: the error says so.
func TestClientNotRunning(t *testing.T) {
	_, err := NewClient(filepath.Join(t.TempDir(), "none.sock")).Status(context.Background())
	if !errors.Is(err, &Error{Code: CodeNotRunning}) {
		t.Fatalf("%v, want not running", err)
	}
}

// FuzzReadResponse: any answer is read without a panic and without
// reading past what it holds; one that net/http reads whole gives the
// same status, body and trailers.
func FuzzReadResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: Homefs-Error\r\n\r\n4\r\nabcd\r\n0\r\nHomefs-Error: {}\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\n\r\nnone",
		"HTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.0 500 Internal Server Error\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		resp, err := readResponse(bufio.NewReaderSize(bytes.NewReader(data), bufferBytes))
		if err != nil {
			return
		}
		body, err := io.ReadAll(resp.Body)
		if len(body) > len(data) {
			t.Fatalf("read %d body bytes from %d", len(body), len(data))
		}
		if err != nil {
			return
		}
		hr, herr := http.ReadResponse(bufio.NewReader(bytes.NewReader(data)), nil)
		if herr != nil {
			return
		}
		hbody, herr := io.ReadAll(hr.Body)
		if herr != nil || hr.StatusCode != resp.StatusCode || len(hr.TransferEncoding) > 0 != (resp.Header.Get("Transfer-Encoding") != "") {
			return
		}
		if !bytes.Equal(hbody, body) {
			t.Fatalf("body %q, net/http reads %q", body, hbody)
		}
		if hr.Trailer.Get(ErrorTrailer) != resp.Trailer.Get(ErrorTrailer) {
			t.Fatalf("trailer %q, net/http reads %q", resp.Trailer.Get(ErrorTrailer), hr.Trailer.Get(ErrorTrailer))
		}
	})
}
