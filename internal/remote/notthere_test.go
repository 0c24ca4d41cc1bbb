package remote

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/internal/remote/s3test"
)

// A missing bucket and an endpoint that is no S3 server say so, rather
// than "session has no head" (a real S3 server, and a web server).
func TestHeadNoBucketNotS3(t *testing.T) {
	srv := s3test.Start(t)
	r := openRemote(t, srv, "no-such-bucket")
	_, err := r.Head(context.Background(), "s")
	if !errors.Is(err, ErrNoBucket) || errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("missing bucket: %v, want ErrNoBucket", err)
	}

	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	w, err := Open(context.Background(), Config{Name: "web", URL: "s3://b/p", Endpoint: web.URL, Encryption: Encryption{KeyFile: s3test.KeyFile(t)}}, Options{Open: s3.Open, Credentials: srv.Credentials(), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Head(context.Background(), "s"); !errors.Is(err, ErrNotS3) {
		t.Fatalf("web server: %v, want ErrNotS3", err)
	}
}
