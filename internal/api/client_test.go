package api

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"testing"
)

// A daemon that dies mid-request (here: accepts, reads, closes) gives an
// error that says what happened, not "Post …: EOF".
func TestClientDaemonGoneMidRequest(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 4096)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	_, err = NewClient(sock).Capture(context.Background(), "s", CaptureRequest{})
	var de *Error
	if !errors.As(err, &de) || de.Code != CodeUnavailable || !strings.Contains(de.Message, "closed the connection before answering") {
		t.Fatalf("error %v, want an unavailable error saying the daemon closed the connection", err)
	}
}

// A dial that the caller's context ended is that context's error, not
// "the daemon is not running": the daemon answers on the socket here.
func TestClientDialCanceled(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = NewClient(sock).Status(ctx)
	if !errors.Is(err, context.Canceled) || errors.Is(err, &Error{Code: CodeNotRunning}) {
		t.Fatalf("error %v, want one wrapping context.Canceled and not of code %q", err, CodeNotRunning)
	}
}
