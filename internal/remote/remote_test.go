package remote

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/manifest"
)

func equalFiles(t *testing.T, got, want files) {
	t.Helper()
	if !slices.Equal(slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want))) {
		t.Fatalf("paths: got %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	for p, w := range want {
		if !bytes.Equal(got[p], w) {
			t.Fatalf("%s: content differs (%d bytes, want %d)", p, len(got[p]), len(w))
		}
	}
}

func TestPushPullRoundTrip(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	r := openRemote(t, srv, srv.Bucket(t))
	a, b := newHost(t), newHost(t)
	want := sampleFiles()
	id := a.capture(t, "s1", want)

	res, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != id || res.Records != 1 || !res.HeadMoved || res.Head.Snapshot != id {
		t.Fatalf("push result %+v", res)
	}
	// A second push finds everything there.
	res2, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res2.Uploaded != 0 || res2.HeadMoved {
		t.Fatalf("second push uploaded %d objects, moved head %v", res2.Uploaded, res2.HeadMoved)
	}

	// Lazy: nodes only, chunks on read through the remote.
	pr, err := Pull(ctx, b.store, b.cat, r, "s1", PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pr.ID != id || pr.Records != 1 {
		t.Fatalf("pull result %+v", pr)
	}
	if _, err := readFiles(t, b.store, b.cat, id); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("chunks local after a lazy pull? err %v", err)
	}
	rt := NewReadThrough(b.store, ReadThroughOptions{Logger: testLogger()}, r)
	got, err := readFiles(t, rt, b.cat, id)
	if err != nil {
		t.Fatal(err)
	}
	equalFiles(t, got, want)
	// Now cached locally.
	got, err = readFiles(t, b.store, b.cat, id)
	if err != nil {
		t.Fatal(err)
	}
	equalFiles(t, got, want)

	// --all on a third host: everything local, no remote needed after.
	c := newHost(t)
	if _, err := Pull(ctx, c.store, c.cat, r, id[:10], PullOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	got, err = readFiles(t, c.store, c.cat, id)
	if err != nil {
		t.Fatal(err)
	}
	equalFiles(t, got, want)
}

// The second push of a session after one small change uploads the changed
// chunk and the path of nodes above it, not the session.
func TestSecondPushIsIncremental(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	r := openRemote(t, srv, srv.Bucket(t))
	a := newHost(t)
	fs := sampleFiles()
	a.capture(t, "s1", fs)
	first, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	fs["notes/deep/b.txt"] = []byte("deep, changed\n")
	a.capture(t, "s1", fs)
	before := r.Stats()
	second, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sent := r.Stats().BytesOut - before.BytesOut
	t.Logf("first push %d objects %d bytes; second %d objects %d bytes (%d checked)",
		first.Uploaded, first.UploadedBytes, second.Uploaded, second.UploadedBytes, second.Checked)
	// One chunk, three tree nodes (deep, notes, root), the record, the head.
	if second.Uploaded != 5 {
		t.Errorf("second push uploaded %d objects, want 5", second.Uploaded)
	}
	if sent > 4<<10 || sent*100 > first.UploadedBytes {
		t.Errorf("second push sent %d bytes after a %d-byte change (first push: %d)", sent, 14, first.UploadedBytes)
	}
}

func TestHeadConflict(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	ra, rb := openRemote(t, srv, bucket), openRemote(t, srv, bucket)
	a, b := newHost(t), newHost(t)
	base := sharedBase(t, a, b, ra, rb)
	a.capture(t, "s1", files{"f": []byte("turn on A")})
	b.capture(t, "s1", files{"f": []byte("turn on B")})

	// Both push at once: exactly one moves the head.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, h := range []*host{a, b} {
		r := []*Remote{ra, rb}[i]
		wg.Go(func() { _, errs[i] = Push(ctx, h.store, h.cat, r, "s1", PushOptions{}) })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrConflict):
			t.Fatalf("push: %v, want ErrConflict", err)
		default:
			t.Logf("loser: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d pushes won, want 1 (errors %v)", ok, errs)
	}
	// The loser read the head before the winner moved it (its turn is on
	// the remote, unreached) or after (it uploaded nothing). A retry
	// conflicts (not a fast-forward).
	for i, h := range []*host{a, b} {
		if errs[i] != nil {
			if _, err := Push(ctx, h.store, h.cat, []*Remote{ra, rb}[i], "s1", PushOptions{}); !errors.Is(err, ErrConflict) {
				t.Fatalf("retry of the losing push: %v, want ErrConflict", err)
			}
		}
	}

	// The primitive itself: a stale ETag and a second create both fail.
	h, err := ra.Head(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ra.SetHead(ctx, "s1", base, h); err != nil {
		t.Fatal(err)
	}
	if _, err := rb.SetHead(ctx, "s1", base, h); !errors.Is(err, ErrConflict) {
		t.Fatalf("SetHead with a stale ETag: %v, want ErrConflict", err)
	}
	if _, err := rb.SetHead(ctx, "s1", base, nil); !errors.Is(err, ErrConflict) {
		t.Fatalf("SetHead create over an existing head: %v, want ErrConflict", err)
	}
}

// sharedBase captures session s1 on a, pushes it through ra and pulls it
// through rb onto b, where s1 continues from it. It returns its id.
func sharedBase(t *testing.T, a, b *host, ra, rb *Remote) string {
	t.Helper()
	ctx := context.Background()
	base := a.capture(t, "s1", files{"f": []byte("base")})
	if _, err := Push(ctx, a.store, a.cat, ra, "s1", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(ctx, b.store, b.cat, rb, "s1", PullOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cat.CreateSession(ctx, "s1", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.cat.Restore(ctx, "s1", base); err != nil {
		t.Fatal(err)
	}
	return base
}

// A push cut off by the server dying is completed by a rerun, and a pull of
// the result reads back everything.
func TestPushInterruptedByServerStop(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	r := openRemote(t, srv, bucket)
	a := newHost(t)
	want := files{}
	for i := range 40 {
		want[string(rune('a'+i%26))+"/"+string(rune('a'+i/26))+".bin"] = randomBytes(uint64(100+i), 2*manifest.ChunkSize)
	}
	a.capture(t, "s1", want)

	var once sync.Once
	_, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{Progress: func(p Progress) {
		if p.Phase == PhaseChunks && p.ObjectsDone >= 10 {
			once.Do(srv.Stop)
		}
	}})
	if err == nil {
		t.Fatal("push succeeded with the server stopped mid-way")
	}
	t.Logf("interrupted push: %v", err)
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if has, err := r.HasSnapshot(ctx, mustHead(t, a, "s1")); err != nil || has {
		t.Fatalf("record on the remote after an interrupted push: %v %v", has, err)
	}
	res, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Uploaded == 0 {
		t.Fatal("rerun uploaded nothing")
	}
	b := newHost(t)
	if _, err := Pull(ctx, b.store, b.cat, r, "s1", PullOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	got, err := readFiles(t, b.store, b.cat, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	equalFiles(t, got, want)
}

func mustHead(t *testing.T, h *host, session string) string {
	t.Helper()
	hd, err := h.cat.Head(context.Background(), session)
	if err != nil {
		t.Fatal(err)
	}
	return hd.Snapshot
}

// A damaged object on the remote is detected and never served; a missing
// one reads as not found.
func TestCorruptAndLostChunks(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	r := openRemote(t, srv, bucket)
	a, b := newHost(t), newHost(t)
	good := randomBytes(7, 2*manifest.ChunkSize)
	id := a.capture(t, "s1", files{"f.bin": good, "g.txt": []byte("intact\n")})
	if _, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(ctx, b.store, b.cat, r, id, PullOptions{}); err != nil {
		t.Fatal(err)
	}
	c0, c1 := cas.Sum(good[:manifest.ChunkSize]), cas.Sum(good[manifest.ChunkSize:])
	damage(t, srv.ObjectPath(bucket, r.chunkKey(c0)))
	if err := os.Remove(srv.ObjectPath(bucket, r.chunkKey(c1))); err != nil {
		t.Fatal(err)
	}
	rt := NewReadThrough(b.store, ReadThroughOptions{ReadAhead: -1, Logger: testLogger()}, r)
	if _, err := rt.Get(ctx, c0); !errors.Is(err, cas.ErrCorrupt) {
		t.Fatalf("damaged chunk: %v, want ErrCorrupt", err)
	}
	if _, err := rt.Get(ctx, c1); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("lost chunk: %v, want ErrNotFound", err)
	}
	if has, _ := b.store.HasMany(ctx, []cas.Ref{c0, c1}); has[0] || has[1] {
		t.Fatalf("bad chunks were cached locally: %v", has)
	}
	if _, err := readFiles(t, rt, b.cat, id); err == nil {
		t.Fatal("read of a file with a damaged chunk succeeded")
	}
}

// damage flips a byte in the middle of a stored object (its payload).
func damage(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x55
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
