package remote

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/manifest"
)

// openKeyed opens bucket/prefix on srv, encrypted with key (hex), or
// plain for "".
func openKeyed(t *testing.T, srv *s3test.Server, bucket, prefix, key string) *Remote {
	t.Helper()
	cfg := Config{Name: "test", URL: "s3://" + bucket + "/" + prefix, Endpoint: srv.Endpoint}
	if key != "" {
		cfg.Encryption = Encryption{KeyFile: s3test.WriteKeyFile(t, key)}
	}
	r, err := Open(context.Background(), cfg, Options{Open: s3.Open, Credentials: srv.Credentials(), MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

const otherKey = "0000000000000000000000000000000000000000000000000000000000000001"

// files under dir of the bucket, by path relative to it, with content.
func bucketFiles(t *testing.T, srv *s3test.Server, bucket, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	root := srv.ObjectPath(bucket, dir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		out[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An encrypted remote's objects hold no plain byte of the session, and
// their names no ref, id or session name; the same session pushed to a
// plain remote shows all of them, so the scan can fail.
func TestEncryptedBucketHoldsNoPlaintext(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	a := newHost(t)
	marker := randomBytes(99, 4096)
	session := "secret-session-name"
	content := files{"notes/marker.txt": marker, "notes/small.txt": []byte("a line of text that zstd cannot hide\n")}
	id := a.capture(t, session, content)
	enc := openKeyed(t, srv, bucket, "enc", s3test.TestKey)
	plain := openKeyed(t, srv, bucket, "plain", "")
	for _, r := range []*Remote{enc, plain} {
		if _, err := Push(ctx, a.store, a.cat, r, session, PushOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Acquire(ctx, session, Holder{Host: "host-a", ID: "id-a"}, AcquireOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ref := cas.Sum(marker)
	leaks := func(dir string) []string {
		var hits []string
		for name, b := range bucketFiles(t, srv, bucket, dir) {
			for _, s := range []string{session, id, ref.Hex(), "host-a"} {
				if strings.Contains(name, s) || bytes.Contains(b, []byte(s)) {
					hits = append(hits, name+" holds "+s)
				}
			}
			if bytes.Contains(b, marker[:64]) || bytes.Contains(b, content["notes/small.txt"][:20]) {
				hits = append(hits, name+" holds file content")
			}
		}
		return hits
	}
	if hits := leaks("plain"); len(hits) < 5 {
		t.Fatalf("the plain remote shows only %v: the scan cannot tell", hits)
	}
	if hits := leaks("enc"); len(hits) > 0 {
		t.Fatalf("the encrypted remote shows %v", hits)
	}

	// Another host with the key reads it all back, lazily and by prefix.
	b := newHost(t)
	r2 := openKeyed(t, srv, bucket, "enc", s3test.TestKey)
	if _, err := Pull(ctx, b.store, b.cat, r2, id[:10], PullOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := readFiles(t, NewReadThrough(b.store, ReadThroughOptions{Logger: testLogger()}, r2), b.cat, id)
	if err != nil {
		t.Fatal(err)
	}
	equalFiles(t, got, content)
	if l, err := r2.Lease(ctx, session); err != nil || l.Holder.Host != "host-a" {
		t.Fatalf("lease: %+v, %v", l, err)
	}
}

// A wrong key fails at the first request with ErrWrongKey, and writes
// nothing; the right key still works after.
func TestEncryptedWrongKey(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	a := newHost(t)
	a.capture(t, "s", files{"f": []byte("data")})
	if _, err := Push(ctx, a.store, a.cat, openKeyed(t, srv, bucket, "p", s3test.TestKey), "s", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	before := bucketFiles(t, srv, bucket, "")
	wrong := openKeyed(t, srv, bucket, "p", otherKey)
	a.capture(t, "s", files{"f": []byte("more data")})
	calls := map[string]func() error{
		"push": func() error { _, err := Push(ctx, a.store, a.cat, wrong, "s", PushOptions{}); return err },
		"pull": func() error {
			_, err := Pull(ctx, newHost(t).store, newHost(t).cat, wrong, "s", PullOptions{})
			return err
		},
		"sessions": func() error { _, err := wrong.Sessions(ctx); return err },
		"gc":       func() error { _, err := GC(ctx, wrong); return err },
		"has":      func() error { _, err := wrong.HasChunks(ctx, []cas.Ref{cas.Sum([]byte("data"))}); return err },
	}
	for name, call := range calls {
		err := call()
		if !errors.Is(err, ErrWrongKey) || !strings.Contains(err.Error(), "remote test: wrong encryption key") {
			t.Errorf("%s with a wrong key: %v, want ErrWrongKey", name, err)
		}
	}
	after := bucketFiles(t, srv, bucket, "")
	if len(after) != len(before) {
		t.Errorf("the wrong key changed the bucket: %d files, %d before", len(after), len(before))
	}
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Errorf("%s changed", name)
		}
	}
	if _, err := openKeyed(t, srv, bucket, "p", s3test.TestKey).Head(ctx, "s"); err != nil {
		t.Fatal(err)
	}
}

// An object copied over another's name fails to authenticate: the
// name is in the associated data.
func TestEncryptedSwappedObjects(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	r := openKeyed(t, srv, bucket, "p", s3test.TestKey)
	a := newHost(t)
	one, two := randomBytes(1, 1000), randomBytes(2, 1000)
	a.capture(t, "s1", files{"one": one})
	a.capture(t, "s2", files{"two": two})
	for _, s := range []string{"s1", "s2"} {
		if _, err := Push(ctx, a.store, a.cat, r, s, PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	swap := func(from, to string) {
		b, err := os.ReadFile(srv.ObjectPath(bucket, from))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(srv.ObjectPath(bucket, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	swap(r.chunkKey(cas.Sum(one)), r.chunkKey(cas.Sum(two)))
	if _, err := r.GetChunk(ctx, cas.Sum(two)); !errors.Is(err, cas.ErrCorrupt) {
		t.Fatalf("a chunk under another's name: %v, want ErrCorrupt", err)
	}
	swap(r.headKey("s1"), r.headKey("s2"))
	if _, err := r.Head(ctx, "s2"); !errors.Is(err, cas.ErrCorrupt) {
		t.Fatalf("a head under another's name: %v, want ErrCorrupt", err)
	}
	if _, err := r.Head(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
}

// Plain and encrypted remotes never share a prefix: an encrypted client
// refuses a plain remote's prefix, and a plain gc refuses an encrypted
// remote (it would take every name for an unreached ref).
func TestEncryptedAndPlainApart(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	a := newHost(t)
	a.capture(t, "s", files{"f": []byte("data")})
	if _, err := Push(ctx, a.store, a.cat, openKeyed(t, srv, bucket, "plain", ""), "s", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := openKeyed(t, srv, bucket, "plain", s3test.TestKey).Heads(ctx); !errors.Is(err, ErrNotEncrypted) {
		t.Fatalf("encrypted client on a plain remote: %v, want ErrNotEncrypted", err)
	}
	if _, err := Push(ctx, a.store, a.cat, openKeyed(t, srv, bucket, "enc", s3test.TestKey), "s", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	before := len(bucketFiles(t, srv, bucket, "enc"))
	if _, err := GC(ctx, openKeyed(t, srv, bucket, "enc", "")); !errors.Is(err, ErrEncrypted) {
		t.Fatalf("plain gc of an encrypted remote: %v, want ErrEncrypted", err)
	}
	if n := len(bucketFiles(t, srv, bucket, "enc")); n != before {
		t.Fatalf("plain gc deleted %d objects", before-n)
	}
}

// Sessions, forget, purge and gc work on an encrypted remote, whose
// names say nothing of what they hold: they read heads and records.
func TestEncryptedSessionsGC(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	r := openKeyed(t, srv, srv.Bucket(t), "p", s3test.TestKey)
	a := newHost(t)
	gone := randomBytes(5, 3*manifest.ChunkSize)
	old := a.capture(t, "gone", files{"big": gone})
	head := a.capture(t, "gone", files{"big": gone, "more": []byte("x")})
	keep := files{"kept": randomBytes(6, 2*manifest.ChunkSize)}
	a.capture(t, "keep", keep)
	a.capture(t, "headless", files{"h": []byte("no head")})
	for _, s := range []string{"gone", "keep", "headless"} {
		if _, err := Push(ctx, a.store, a.cat, r, s, PushOptions{NoHead: s == "headless"}); err != nil {
			t.Fatal(err)
		}
	}
	checkSessionsForget(t, r, head, old, len(gone))
	if _, err := r.Purge(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	res, err := GC(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if res.Heads != 1 || res.DeletedRecords != 1 || res.DeletedChunks < 4 || res.DeletedBytes < int64(len(gone)) {
		t.Fatalf("gc: %+v", res)
	}
	b := newHost(t)
	if _, err := Pull(ctx, b.store, b.cat, r, "keep", PullOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	id := mustHead(t, a, "keep")
	got, err := readFiles(t, b.store, b.cat, id)
	if err != nil {
		t.Fatal(err)
	}
	equalFiles(t, got, keep)
	if again, err := GC(ctx, r); err != nil || again.DeletedChunks != 0 || again.Chunks != res.Chunks {
		t.Fatalf("second gc: %+v, %v", again, err)
	}
}

// checkSessionsForget requires r to list the sessions TestEncryptedSessionsGC
// pushed (gone with its head, two snapshots and at least goneBytes; the
// headless one without a head), and forget to refuse head and take old.
func checkSessionsForget(t *testing.T, r *Remote, head, old string, goneBytes int) {
	t.Helper()
	ctx := context.Background()
	infos, err := r.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 3 || infos[1].Session != "headless" || infos[1].Head != "" || infos[0].Session != "gone" || infos[0].Head != head || infos[0].Snapshots != 2 || infos[0].Bytes < int64(goneBytes) {
		t.Fatalf("sessions: %+v", infos)
	}
	if _, err := r.Forget(ctx, []string{head[:12]}, false); !errors.Is(err, ErrHeadSnapshot) {
		t.Fatalf("forget of a head: %v", err)
	}
	if ids, err := r.Forget(ctx, []string{old[:12]}, false); err != nil || len(ids) != 1 || ids[0] != old {
		t.Fatalf("forget: %v %v", ids, err)
	}
}
