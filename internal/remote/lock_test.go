package remote

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/internal/remote/s3test"
)

// signalHandler sends on ch when a record with message msg is logged.
type signalHandler struct {
	slog.Handler
	msg string
	ch  chan struct{}
}

func (h signalHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo
}

func (h signalHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == h.msg {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	if !h.Handler.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}

func openSignaling(t *testing.T, srv *s3test.Server, bucket, msg string) (*Remote, chan struct{}) {
	t.Helper()
	ch := make(chan struct{}, 1)
	log := slog.New(signalHandler{Handler: testLogger().Handler(), msg: msg, ch: ch})
	r, err := Open(context.Background(), Config{Name: "test", URL: "s3://" + bucket + "/p", Endpoint: srv.Endpoint, Encryption: Encryption{KeyFile: s3test.KeyFile(t)}},
		Options{Open: s3.Open, Credentials: srv.Credentials(), Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return r, ch
}

// TestPushWaitsForGCLock: a push that finds a fresh gc lock uploads
// nothing until the lock is gone, then completes; a stale one (its
// last-modified time 31 minutes behind) does not hold it.
func TestPushWaitsForGCLock(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	r, waits := openSignaling(t, srv, bucket, "push waits for remote gc")
	ctx := context.Background()
	a := newHost(t)
	a.capture(t, "s1", sampleFiles())

	gc, err := r.writeLock(ctx, lockGC)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{})
		done <- err
	}()
	<-waits
	// The push saw the lock and withdrew: nothing of it is on the remote.
	if ids, err := r.Snapshots(ctx, ""); err != nil || len(ids) != 0 {
		t.Fatalf("records while gc holds its lock: %v, %v", ids, err)
	}
	sizes, err := r.chunkSizes(ctx)
	if err != nil || len(sizes) != 0 {
		t.Fatalf("chunks while gc holds its lock: %d, %v", len(sizes), err)
	}
	gc.release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := r.Head(ctx, "s1"); err != nil {
		t.Fatal(err)
	}

	// A stale gc lock: the push goes ahead without waiting.
	stale, err := r.writeLock(ctx, lockGC)
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-LockStale - time.Minute)
	if err := os.Chtimes(srv.ObjectPath(bucket, stale.key), old, old); err != nil {
		t.Fatal(err)
	}
	a.capture(t, "s1", files{"b.txt": []byte("two\n")})
	if _, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waits:
		t.Fatal("the push waited for a stale gc lock")
	default:
	}
	stale.release()
}

// TestGCWaitsForPushLock: gc deletes nothing while a push lock is fresh,
// and then what no head reaches.
func TestGCWaitsForPushLock(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	r, waits := openSignaling(t, srv, bucket, "remote gc waits for a push")
	ctx := context.Background()
	a := newHost(t)
	a.capture(t, "gone", files{"g.txt": randomBytes(1, 200<<10)})
	a.capture(t, "kept", sampleFiles())
	for _, s := range []string{"gone", "kept"} {
		if _, err := Push(ctx, a.store, a.cat, r, s, PushOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Purge(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	before, err := r.chunkSizes(ctx)
	if err != nil {
		t.Fatal(err)
	}

	push, err := r.writeLock(ctx, lockPush)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		res *GCResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := GC(ctx, r)
		done <- result{res, err}
	}()
	<-waits
	if now, err := r.chunkSizes(ctx); err != nil || len(now) != len(before) {
		t.Fatalf("gc deleted while a push held its lock: %d of %d chunks left, %v", len(now), len(before), err)
	}
	push.release()
	got := <-done
	if got.err != nil {
		t.Fatal(got.err)
	}
	if got.res.WaitedPushes != 1 || got.res.Heads != 1 || got.res.DeletedChunks == 0 {
		t.Fatalf("gc: %+v", got.res)
	}
	after, err := r.chunkSizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before)-got.res.DeletedChunks || len(after) != got.res.Chunks {
		t.Fatalf("chunks: %d before, %d after, result %+v", len(before), len(after), got.res)
	}
	b := newHost(t)
	if _, err := Pull(ctx, b.store, b.cat, r, "kept", PullOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(ctx, b.store, b.cat, r, "gone", PullOptions{}); !errors.Is(err, ErrNoSnapshot) {
		t.Fatalf("pull of a purged session: %v", err)
	}
}
