package remote

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/manifest"
)

// quick are timeouts small enough for fault tests: a silence of half a
// second fails an attempt, and retries stop after a second.
var quick = Timeouts{Connect: time.Second, Idle: 500 * time.Millisecond, Request: 10 * time.Second, RetryTotal: time.Second}

// openAt returns a client for bucket on endpoint with timeouts to.
func openAt(t testing.TB, endpoint, bucket string, to Timeouts) *Remote {
	t.Helper()
	r, err := Open(context.Background(), Config{Name: "test", URL: "s3://" + bucket + "/p", Endpoint: endpoint, Encryption: Encryption{KeyFile: s3test.KeyFile(t)}},
		Options{Open: s3.Open, Credentials: &Credentials{AccessKeyID: s3test.AccessKey, SecretAccessKey: s3test.SecretKey}, Timeouts: to, MaxBackoff: 200 * time.Millisecond, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// hangGuard is the context of an operation that must end by itself: far
// longer than any bounded failure, so that reaching it means a hang.
func hangGuard(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// requireStalled checks that err is the bounded failure of a silent
// server, not the guard's expiry.
func requireStalled(t *testing.T, ctx context.Context, what string, err error) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("%s hung until the test's guard expired: %v", what, err)
	}
	if !errors.Is(err, ErrStalled) {
		t.Fatalf("%s: %v, want an error wrapping ErrStalled", what, err)
	}
	var op *net.OpError
	if !errors.As(err, &op) {
		t.Fatalf("%s: %v is no *net.OpError (fusefs maps those to EIO)", what, err)
	}
	t.Logf("%s: %v", what, err)
}

// TestSilentServer: against a server that accepts connections and never
// answers, push, pull and a lazy read fail with a bounded, retried error
// instead of hanging.
func TestSilentServer(t *testing.T) {
	ctx := hangGuard(t)
	r := openAt(t, s3test.Silent(t), "silent", quick)
	a := newHost(t)
	a.capture(t, "s1", files{"f.txt": []byte("never pushed\n")})

	_, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{})
	requireStalled(t, ctx, "push", err)
	if st := r.Stats(); st.Heads+st.Gets+st.Puts+st.Lists < 2 {
		t.Fatalf("push made %+v requests: the stall was not retried", st)
	}
	b := newHost(t)
	_, err = Pull(ctx, b.store, b.cat, r, "s1", PullOptions{})
	requireStalled(t, ctx, "pull", err)
	rt := NewReadThrough(b.store, ReadThroughOptions{ReadAhead: -1, Logger: testLogger()}, r)
	_, err = rt.Get(ctx, cas.Sum([]byte("not local")))
	requireStalled(t, ctx, "lazy read", err)
}

// TestFrozenServer: a gateway frozen with SIGSTOP keeps its port and
// answers nothing. Push and a lazy read fail, bounded; once it is
// continued both succeed.
func TestFrozenServer(t *testing.T) {
	ctx := hangGuard(t)
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	r := openAt(t, srv.Endpoint, bucket, quick)
	a, b := newHost(t), newHost(t)
	content := randomBytes(11, 2*manifest.ChunkSize)
	id := a.capture(t, "s1", files{"f.bin": content})
	if _, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Pull(ctx, b.store, b.cat, r, id, PullOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := NewReadThrough(b.store, ReadThroughOptions{ReadAhead: -1, Logger: testLogger()}, r)
	chunk := cas.Sum(content[:manifest.ChunkSize])
	a.capture(t, "s1", files{"f.bin": content, "g.txt": []byte("second turn\n")})

	srv.Freeze()
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			srv.Thaw()
		}
	})
	_, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{})
	requireStalled(t, ctx, "push to a frozen gateway", err)
	_, err = rt.Get(ctx, chunk)
	requireStalled(t, ctx, "lazy read from a frozen gateway", err)
	srv.Thaw()
	thawed = true

	if _, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{}); err != nil {
		t.Fatalf("push after the gateway continued: %v", err)
	}
	got, err := rt.Get(ctx, chunk)
	if err != nil {
		t.Fatalf("lazy read after the gateway continued: %v", err)
	}
	if string(got) != string(content[:manifest.ChunkSize]) {
		t.Fatal("lazy read returned the wrong bytes")
	}
}

// TestPushSurvivesRestart: the gateway is killed midway through a push
// and started again on the same port 3 s later; with the default retry
// budget the push completes by itself, and another host reads it back.
func TestPushSurvivesRestart(t *testing.T) {
	ctx := hangGuard(t)
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	r := openAt(t, srv.Endpoint, bucket, Timeouts{})
	a := newHost(t)
	want := files{}
	for i := range 40 {
		want[string(rune('a'+i%26))+"/"+string(rune('a'+i/26))+".bin"] = randomBytes(uint64(300+i), 2*manifest.ChunkSize)
	}
	a.capture(t, "s1", want)

	var (
		once       sync.Once
		restarted  = make(chan error, 1)
		stoppedMid bool
	)
	res, err := Push(ctx, a.store, a.cat, r, "s1", PushOptions{Progress: func(p Progress) {
		if p.Phase == PhaseChunks && p.ObjectsDone >= 10 {
			once.Do(func() {
				srv.Stop()
				stoppedMid = true
				go func() {
					time.Sleep(3 * time.Second)
					restarted <- srv.Restart()
				}()
			})
		}
	}})
	if !stoppedMid {
		t.Fatal("the push ended before the gateway was stopped")
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("push across a 3 s restart: %v", err)
	}
	if st := r.Stats(); st.Puts <= int64(res.Uploaded) {
		t.Fatalf("%d puts for %d objects: the restart was never seen", st.Puts, res.Uploaded)
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
