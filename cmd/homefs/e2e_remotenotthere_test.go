package main

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/remote/s3test"
)

// TestRemoteNotThere: a remote whose bucket does not exist is "not found"
// (exit 3) naming the bucket, and an endpoint that is no S3 server (a web
// server's 404) is a usage error (exit 2) saying so; neither is taken for
// a session without a head. The first command that reaches the remote
// says it: pull and push for a plain remote, remote add itself for an
// encrypted one (it writes the key check).
func TestRemoteNotThere(t *testing.T) {
	srv := s3test.Start(t)
	web := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(web.Close)
	e := newEnv(t)
	e.daemonEnv = []string{"AWS_ACCESS_KEY_ID=" + s3test.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3test.SecretKey}
	e.start()
	e.ok("session", "create", "s")
	e.ok("capture", "s")
	for _, tc := range []struct {
		name, url, endpoint string
		code                int
		want                string
	}{
		{"nobucket", "s3://no-such-bucket/fleet", srv.Endpoint, exitNotFound, "bucket no-such-bucket does not exist at " + srv.Endpoint},
		{"web", "s3://b/fleet", web.URL, exitUsage, web.URL + " answered 404 without an S3 error (is it an S3 endpoint?)"},
	} {
		add := []string{"remote", "add", tc.name, tc.url, "--endpoint", tc.endpoint}
		if s3test.Encrypted() {
			e.fails(tc.code, tc.want, add...)
			continue
		}
		e.ok(add...)
		for _, args := range [][]string{{"pull", "s", tc.name}, {"pull", "0123456789ab", tc.name}, {"push", "s", tc.name}} {
			r := e.fails(tc.code, tc.want, args...)
			require.NotContains(t, r.stderr, "no head", "homefs %v", args)
			require.NotContains(t, r.stderr, "no such snapshot", "homefs %v", args)
		}
	}
}
