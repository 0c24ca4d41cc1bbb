package remote

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
)

// heldLock is a lock whose last rewrite landed ago.
func heldLock(ago time.Duration) *lock {
	return &lock{r: &Remote{cfg: Config{Name: "t"}}, name: "push-t", landed: time.Now().Add(-ago)}
}

// putCounting puts ref for the push joined as since and reports whether
// send ran.
func putCounting(t *testing.T, u *uploads, since uint64, l *lock, ref cas.Ref) bool {
	t.Helper()
	ran := false
	sent, err := u.put(context.Background(), since, l, ref, func(context.Context) error {
		ran = true
		return nil
	})
	if err != nil || sent != ran {
		t.Fatalf("put %s: sent %v, send ran %v, err %v", ref.Short(), sent, ran, err)
	}
	return ran
}

// The rules of trust: an upload counts for another push only when it
// finished after that push joined, under a lock that still held; an
// upload in flight is waited for, and a failed one is done again.
func TestUploadsTrust(t *testing.T) {
	ctx := context.Background()
	u := newUploads()
	fresh, lapsed := heldLock(0), heldLock(LockStale)
	x, y, z, w := cas.Sum([]byte("x")), cas.Sum([]byte("y")), cas.Sum([]byte("z")), cas.Sum([]byte("w"))

	p1, p2 := u.join(), u.join()
	if !putCounting(t, u, p1, fresh, x) {
		t.Fatal("first upload of x not sent")
	}
	if putCounting(t, u, p2, fresh, x) {
		t.Fatal("x sent again by a push that joined before its upload")
	}
	p3 := u.join()
	if !putCounting(t, u, p3, fresh, x) {
		t.Fatal("x skipped by a push that joined after its upload")
	}
	// The uploader's lock had lapsed: a gc may have ignored it.
	if !putCounting(t, u, p1, lapsed, y) || !putCounting(t, u, p2, fresh, y) {
		t.Fatal("an upload under a lapsed lock counted for another push")
	}

	// In flight: the second push waits for the first's upload.
	release, started := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := u.put(ctx, p1, fresh, z, func(context.Context) error {
			close(started)
			<-release
			return nil
		})
		first <- err
	}()
	<-started
	second := make(chan bool, 1)
	go func() { second <- putCounting(t, u, p2, fresh, z) }()
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if <-second {
		t.Fatal("z sent again while its upload was in flight")
	}

	// A failed upload: the waiter sends it itself.
	failed := errors.New("put failed")
	if _, err := u.put(ctx, p1, fresh, w, func(context.Context) error { return failed }); !errors.Is(err, failed) {
		t.Fatalf("failed put: %v", err)
	}
	if !putCounting(t, u, p2, fresh, w) {
		t.Fatal("w skipped after its upload failed")
	}

	for _, p := range []uint64{p1, p2, p3} {
		u.leave(p)
	}
	if len(u.done) != 0 || len(u.active) != 0 || len(u.inflight) != 0 {
		t.Fatalf("state left after every push ended: %d done, %d active, %d in flight", len(u.done), len(u.active), len(u.inflight))
	}
}
