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
