package remote

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/remote/s3test"
)

// TestLease: two holders of one bucket's lease, through acquire, refusal,
// renewal, release, expiry and steal.
func TestLease(t *testing.T) {
	srv := s3test.Start(t)
	r := openRemote(t, srv, srv.Bucket(t))
	ctx := context.Background()
	a, b := Holder{Host: "a", ID: "ida"}, Holder{Host: "b", ID: "idb"}

	_, err := r.Lease(ctx, "s")
	require.ErrorIs(t, err, ErrNoLease)
	la, err := r.Acquire(ctx, "s", a, AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, a, la.Holder)

	_, err = r.Acquire(ctx, "s", b, AcquireOptions{TTL: time.Hour})
	require.ErrorIs(t, err, ErrLeased)
	require.ErrorContains(t, err, "a (id ida)")

	// Acquiring again is a renewal that keeps the token.
	la2, err := r.Acquire(ctx, "s", a, AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, la.Token, la2.Token)
	la3, err := r.Renew(ctx, la2)
	require.NoError(t, err)
	require.GreaterOrEqual(t, la3.ExpiresNs, la2.ExpiresNs)
	// A renewal from a stale version of our own lease (an answer lost)
	// still renews: the token says it is ours.
	la4, err := r.Renew(ctx, la)
	require.NoError(t, err)
	require.Equal(t, la.Token, la4.Token)
	require.NotEqual(t, la3.ETag, la4.ETag)
	la3 = la4

	_, err = r.Release(ctx, "s", b)
	require.ErrorIs(t, err, ErrLeased, "only the holder releases")
	rel, err := r.Release(ctx, "s", a)
	require.NoError(t, err)
	require.True(t, rel.Released)
	_, err = r.Renew(ctx, la3)
	require.ErrorIs(t, err, ErrLeased, "a released lease is not renewed")

	lb, err := r.Acquire(ctx, "s", b, AcquireOptions{TTL: MinLeaseTTL})
	require.NoError(t, err)
	require.NotEqual(t, la.Token, lb.Token)
	// Past its expiry, by this host's clock, the lease is free.
	for cur, err := r.Lease(ctx, "s"); cur.Live(time.Now()); cur, err = r.Lease(ctx, "s") {
		require.NoError(t, err)
		time.Sleep(100 * time.Millisecond)
	}
	la, err = r.Acquire(ctx, "s", a, AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)
	_, err = r.Renew(ctx, lb)
	require.ErrorIs(t, err, ErrLeased, "an expired lease taken over is not renewed")

	// Steal takes a live lease; the robbed holder's renewal fails.
	lb, err = r.Acquire(ctx, "s", b, AcquireOptions{TTL: time.Hour, Steal: true})
	require.NoError(t, err)
	require.Equal(t, b, lb.Holder)
	_, err = r.Renew(ctx, la)
	require.ErrorIs(t, err, ErrLeased)
	require.ErrorContains(t, err, "b (id idb)")

	_, err = r.Acquire(ctx, "s", a, AcquireOptions{TTL: time.Millisecond})
	require.Error(t, err, "a ttl under the minimum")
}

// TestLeaseRace: hosts acquiring one lease at once, absent and then
// released: exactly one wins each round, and the lease names it.
func TestLeaseRace(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	ctx := context.Background()
	const hosts = 4
	remotes := make([]*Remote, hosts)
	for i := range remotes {
		remotes[i] = openRemote(t, srv, bucket)
	}
	for round := range 5 {
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []Holder
		)
		for i, r := range remotes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				h := Holder{Host: fmt.Sprintf("h%d", i), ID: fmt.Sprint(i)}
				_, err := r.Acquire(ctx, "s", h, AcquireOptions{TTL: time.Hour})
				if err == nil {
					mu.Lock()
					winners = append(winners, h)
					mu.Unlock()
					return
				}
				if !errors.Is(err, ErrLeased) {
					t.Errorf("round %d, host %d: %v", round, i, err)
				}
			}()
		}
		wg.Wait()
		require.Len(t, winners, 1, "round %d", round)
		cur, err := remotes[0].Lease(ctx, "s")
		require.NoError(t, err)
		require.Equal(t, winners[0], cur.Holder)
		_, err = remotes[0].Release(ctx, "s", winners[0])
		require.NoError(t, err)
	}
}

// TestStealRacesRenewal: a steal that loses its write to the victim's
// renewal, made between the steal's read and its write, tries again and
// takes the lease; one that loses to another host's acquisition reports
// that host.
func TestStealRacesRenewal(t *testing.T) {
	srv := s3test.Start(t)
	r := openRemote(t, srv, srv.Bucket(t))
	ctx := context.Background()
	a, b, c := Holder{Host: "a", ID: "ida"}, Holder{Host: "b", ID: "idb"}, Holder{Host: "c", ID: "idc"}
	la, err := r.Acquire(ctx, "s", a, AcquireOptions{TTL: time.Hour})
	require.NoError(t, err)

	renewed := 0
	beforeLeaseWrite = func() {
		if renewed == 0 {
			renewed++
			la, err = r.Renew(ctx, la)
			require.NoError(t, err)
		}
	}
	t.Cleanup(func() { beforeLeaseWrite = nil })
	lb, err := r.Acquire(ctx, "s", b, AcquireOptions{TTL: time.Hour, Steal: true})
	require.NoError(t, err, "the steal tries again after the victim's renewal")
	require.Equal(t, b, lb.Holder)
	require.Equal(t, 1, renewed)
	_, err = r.Renew(ctx, la)
	require.ErrorIs(t, err, ErrLeased, "the victim lost it")

	// Another host's acquisition between the read and the write wins.
	beforeLeaseWrite = func() {
		beforeLeaseWrite = nil
		_, err := r.Acquire(ctx, "s", c, AcquireOptions{TTL: time.Hour, Steal: true})
		require.NoError(t, err)
	}
	_, err = r.Acquire(ctx, "s", a, AcquireOptions{TTL: time.Hour, Steal: true})
	require.ErrorIs(t, err, ErrLeased)
	require.ErrorContains(t, err, "c (id idc)")
}
