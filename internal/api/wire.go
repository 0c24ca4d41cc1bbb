package api

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"strconv"
	"strings"
)

// The client speaks HTTP/1.1 itself, one request per connection
// (Connection: close), rather than through net/http: net/http links
// crypto/tls and x509, whose package initialisation every call of the CLI
// would pay at start (docs/BENCHMARKS.md). It needs what the daemon's
// net/http server sends and no more: a status line and headers, then a
// body framed by Content-Length, by chunks (streams: progress lines, a
// run's hold, export's tar and its trailer) or by the connection's end;
// and it sends a body of known length with Content-Length, any other
// chunked, while the answer is read (a run's hold is full duplex).

// The read buffer is small, as net/http's is: each page a call touches
// costs at start (docs/BENCHMARKS.md). A longer line (an error trailer
// with a long message) is gathered up to maxLineBytes.
const (
	bufferBytes    = 4 << 10
	maxLineBytes   = 1 << 20 // a status, header, trailer or chunk size line
	maxHeaderLines = 256     // headers, or trailers
)

// errMalformed: the daemon's answer is not the HTTP/1.1 the client reads.
var errMalformed = errors.New("malformed HTTP answer")

// response is the daemon's answer to one request.
type response struct {
	StatusCode int
	Status     string // "404 Not Found"
	Header     textproto.MIMEHeader
	// Trailer holds the trailers of a chunked body once Body has
	// returned io.EOF.
	Trailer textproto.MIMEHeader
	Body    io.ReadCloser
}

// writeRequestHead writes the request line and headers; length is the
// body's length, -1 for a chunked body, or -2 for none.
func writeRequestHead(w *bufio.Writer, method, target, contentType string, length int64) error {
	w.WriteString(method + " " + target + " HTTP/1.1\r\nHost: homefs\r\nUser-Agent: homefs\r\nConnection: close\r\n")
	if contentType != "" {
		w.WriteString("Content-Type: " + contentType + "\r\n")
	}
	switch {
	case length >= 0:
		w.WriteString("Content-Length: " + strconv.FormatInt(length, 10) + "\r\n")
	case length == -1:
		w.WriteString("Transfer-Encoding: chunked\r\n")
	}
	w.WriteString("\r\n")
	return w.Flush()
}

// bodyLength is the length of a body whose length is known in advance
// (as net/http knows it), -1 when it is not, -2 without a body.
func bodyLength(method string, body io.Reader) int64 {
	switch b := body.(type) {
	case nil:
		if method == "GET" {
			return -2
		}
		return 0
	case *bytes.Reader:
		return int64(b.Len())
	case *strings.Reader:
		return int64(b.Len())
	}
	return -1
}

// bodyError is an error of the caller's request body, not of the daemon.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return "request body: " + e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// writeChunked sends body as chunks, each as soon as it is read, then the
// last chunk.
func writeChunked(w *bufio.Writer, body io.Reader) error {
	buf := make([]byte, 32<<10)
	for {
		n, rerr := body.Read(buf)
		if n > 0 {
			w.WriteString(strconv.FormatInt(int64(n), 16) + "\r\n")
			w.Write(buf[:n])
			w.WriteString("\r\n")
			if err := w.Flush(); err != nil {
				return err
			}
		}
		if rerr == io.EOF {
			w.WriteString("0\r\n\r\n")
			return w.Flush()
		}
		if rerr != nil {
			return &bodyError{rerr}
		}
	}
}

// readLine reads one line without its CRLF (or LF), at most maxLineBytes.
func readLine(r *bufio.Reader) (string, error) {
	var long []byte // a line longer than r's buffer, so far
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(long)+len(line) > maxLineBytes {
				return "", fmt.Errorf("%w: line longer than %d bytes", errMalformed, maxLineBytes)
			}
			long = append(long, line...)
			continue
		}
		if long != nil {
			line = append(long, line...)
		}
		switch {
		case err == io.EOF && len(line) > 0:
			return "", io.ErrUnexpectedEOF
		case err != nil:
			return "", err
		}
		return string(bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))), nil
	}
}

// readHeader reads header (or trailer) lines up to the empty line.
func readHeader(r *bufio.Reader) (textproto.MIMEHeader, error) {
	h := make(textproto.MIMEHeader)
	for i := 0; ; i++ {
		line, err := readLine(r)
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return nil, err
		}
		if line == "" {
			return h, nil
		}
		if i == maxHeaderLines {
			return nil, fmt.Errorf("%w: more than %d header lines", errMalformed, maxHeaderLines)
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("%w: header line %q", errMalformed, line)
		}
		k = textproto.CanonicalMIMEHeaderKey(k)
		h[k] = append(h[k], strings.Trim(v, " \t"))
	}
}

// readResponse reads an answer's status line and headers from r and
// frames its body; interim answers (100 Continue) are skipped. io.EOF
// means the daemon closed the connection without answering.
func readResponse(r *bufio.Reader) (*response, error) {
	for {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		proto, status, _ := strings.Cut(line, " ")
		code, _, _ := strings.Cut(status, " ")
		n, err := strconv.Atoi(code)
		if !strings.HasPrefix(proto, "HTTP/1.") || len(code) != 3 || err != nil || n < 100 {
			return nil, fmt.Errorf("%w: status line %q", errMalformed, line)
		}
		h, err := readHeader(r)
		if err != nil {
			return nil, err
		}
		if n < 200 && n != 101 {
			continue
		}
		resp := &response{StatusCode: n, Status: status, Header: h}
		body, err := frameBody(r, resp)
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(body)
		return resp, nil
	}
}

// frameBody returns the reader of resp's body on r.
func frameBody(r *bufio.Reader, resp *response) (io.Reader, error) {
	if resp.StatusCode == 204 || resp.StatusCode == 304 || resp.StatusCode == 101 {
		return bytes.NewReader(nil), nil
	}
	if te := resp.Header.Values("Transfer-Encoding"); len(te) > 0 {
		if len(te) != 1 || !strings.EqualFold(te[0], "chunked") {
			return nil, fmt.Errorf("%w: transfer encoding %q", errMalformed, te)
		}
		return &chunkedReader{r: r, resp: resp}, nil
	}
	if cl := resp.Header.Values("Content-Length"); len(cl) > 0 {
		n, err := strconv.ParseInt(cl[0], 10, 64)
		for _, v := range cl[1:] {
			if v != cl[0] {
				err = errMalformed
			}
		}
		if err != nil || n < 0 || cl[0][0] == '+' {
			return nil, fmt.Errorf("%w: content length %q", errMalformed, cl)
		}
		return &lengthReader{r: r, n: n}, nil
	}
	return r, nil // to the connection's end
}

// lengthReader reads n bytes; fewer is io.ErrUnexpectedEOF.
type lengthReader struct {
	r io.Reader
	n int64
}

func (l *lengthReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if err == io.EOF && l.n > 0 {
		err = io.ErrUnexpectedEOF
	} else if err == io.EOF {
		err = nil
	}
	return n, err
}

// chunkedReader reads a chunked body, then its trailers into
// resp.Trailer.
type chunkedReader struct {
	r    *bufio.Reader
	resp *response
	n    int64 // left in the current chunk
	crlf bool  // the current chunk's CRLF is still to be read
	err  error // sticky; io.EOF after the trailers
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	for c.err == nil && c.n == 0 {
		c.err = c.next()
	}
	if c.err != nil {
		return 0, c.err
	}
	if int64(len(p)) > c.n {
		p = p[:c.n]
	}
	n, err := c.r.Read(p)
	c.n -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// next reads the end of the chunk before and the size of the next; at
// the last chunk, the trailers.
func (c *chunkedReader) next() error {
	if c.crlf {
		if line, err := readLine(c.r); err != nil || line != "" {
			return unexpected(err, "no CRLF after a chunk")
		}
		c.crlf = false
	}
	line, err := readLine(c.r)
	if err != nil {
		return unexpected(err, "")
	}
	size, _, _ := strings.Cut(line, ";") // chunk extensions: none expected, ignored
	size = strings.TrimRight(size, " \t")
	n, err := strconv.ParseInt(size, 16, 64)
	if err != nil || n < 0 || size == "" || size[0] == '+' || size[0] == '-' {
		return fmt.Errorf("%w: chunk size %q", errMalformed, line)
	}
	if n == 0 {
		t, err := readHeader(c.r)
		if err != nil {
			return unexpected(err, "")
		}
		c.resp.Trailer = t
		return io.EOF
	}
	c.n, c.crlf = n, true
	return nil
}

// unexpected turns the end of the connection inside a body into
// io.ErrUnexpectedEOF, and a nil error into errMalformed saying why.
func unexpected(err error, why string) error {
	switch {
	case err == io.EOF:
		return io.ErrUnexpectedEOF
	case err == nil:
		return fmt.Errorf("%w: %s", errMalformed, why)
	}
	return err
}
