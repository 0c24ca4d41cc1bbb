package remote

import (
	"context"
	"testing"
	"time"

	"github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/internal/remote/s3test"
)

// TestPing: a remote that answers pings; one that does not fails the ping
// at once, not after the retries a transfer would make; a stopped server
// too.
func TestPing(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	r := openRemote(t, srv, srv.Bucket(t))
	if err := r.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	srv.Stop()
	start := time.Now()
	if err := r.Ping(ctx); err == nil {
		t.Fatal("ping of a stopped server succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("a failed ping took %v", d)
	}
}

// TestPingUnreachable needs no server: nothing listens on the endpoint.
func TestPingUnreachable(t *testing.T) {
	r, err := Open(context.Background(), Config{Name: "gone", URL: "s3://b/p", Endpoint: "http://127.0.0.1:1"},
		Options{Open: s3.Open, Credentials: &Credentials{AccessKeyID: "k", SecretAccessKey: "s"}, MaxAttempts: 6, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = r.Ping(context.Background())
	if err == nil {
		t.Fatal("ping succeeded")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("ping retried: took %v (%v)", d, err)
	}
	if r.Stats().Lists != 1 {
		t.Errorf("lists = %d, want 1", r.Stats().Lists)
	}
}
