package remote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/manifest"
)

// bucketObjects counts the chunks, nodes and records under r's prefix.
func bucketObjects(t *testing.T, r *Remote) int {
	t.Helper()
	ctx := context.Background()
	sizes, err := r.chunkSizes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	records, err := r.recordNames(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(sizes) + len(records)
}

// A push whose remote head lies on another line fails with ErrConflict
// before it uploads anything: not a chunk, a node or a record of its turn.
func TestDivergingPushUploadsNothing(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	ra, rb := openRemote(t, srv, bucket), openRemote(t, srv, bucket)
	a, b := newHost(t), newHost(t)
	sharedBase(t, a, b, ra, rb)
	a.capture(t, "s1", files{"f": []byte("turn on A")})
	if _, err := Push(ctx, a.store, a.cat, ra, "s1", PushOptions{}); err != nil {
		t.Fatal(err)
	}
	// B's turn has a large new file: many objects the remote lacks.
	b.capture(t, "s1", files{"f": []byte("turn on B"), "big.bin": randomBytes(9, 40*manifest.ChunkSize)})

	before := bucketObjects(t, rb)
	res, err := Push(ctx, b.store, b.cat, rb, "s1", PushOptions{})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("diverging push: %v, want ErrConflict", err)
	}
	t.Logf("refused: %v", err)
	if res == nil || res.Uploaded != 0 || res.Records != 0 {
		t.Fatalf("diverging push uploaded: %+v", res)
	}
	if after := bucketObjects(t, rb); after != before {
		t.Fatalf("bucket holds %d objects after the refused push, %d before", after, before)
	}
	if res.Head == nil || res.Head.Snapshot != mustHead(t, a, "s1") {
		t.Fatalf("refused push reports head %+v, want A's turn", res.Head)
	}
	// Without a head to move there is no conflict: the turn uploads.
	res, err = Push(ctx, b.store, b.cat, rb, "s1", PushOptions{NoHead: true})
	if err != nil || res.Uploaded < 40 {
		t.Fatalf("NoHead push of the diverging turn: %+v, %v", res, err)
	}
}

// pushBoth pushes sessions s1 and s2 of h at once, through ra and rb, each
// waiting before its first upload until the other is there too: both
// scans find every object absent.
func pushBoth(t *testing.T, h *host, ra, rb *Remote) [2]*PushResult {
	t.Helper()
	var (
		barrier sync.WaitGroup
		wg      sync.WaitGroup
		res     [2]*PushResult
		errs    [2]error
	)
	barrier.Add(2)
	for i, r := range []*Remote{ra, rb} {
		var once sync.Once
		arrive := func() { once.Do(barrier.Done) }
		wg.Go(func() {
			defer arrive() // a push that fails early must not hold the other
			res[i], errs[i] = Push(context.Background(), h.store, h.cat, r, fmt.Sprintf("s%d", i+1), PushOptions{Progress: func(p Progress) {
				if p.Phase == PhaseChunks {
					arrive()
					barrier.Wait()
				}
			}})
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return res
}

// Two pushes through one Remote of sessions that share a 6 MiB file send
// each object once: the second waits for the first's upload of a shared
// chunk instead of sending it again. Two Remotes (two processes) send the
// shared file twice, which shows the two pushes did overlap.
func TestConcurrentPushesCoalesce(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	h := newHost(t)
	shared := randomBytes(11, 96*manifest.ChunkSize)
	h.capture(t, "s1", files{"shared.bin": shared, "a.txt": []byte("only in s1\n")})
	h.capture(t, "s2", files{"shared.bin": shared, "b.txt": []byte("only in s2\n")})

	one := openRemote(t, srv, srv.Bucket(t))
	before := one.Stats()
	res := pushBoth(t, h, one, one)
	puts := one.Stats().Puts - before.Puts
	unique := bucketObjects(t, one)
	sent := res[0].Uploaded + res[1].Uploaded
	t.Logf("one Remote: %d objects on the bucket, %d sent (%d and %d), %d shared, %d PUT requests",
		unique, sent, res[0].Uploaded, res[1].Uploaded, res[0].Shared+res[1].Shared, puts)
	// 2 locks and 2 heads besides the objects; a retried PUT or two.
	if sent > unique+2 || puts > int64(unique+4+4) {
		t.Errorf("one Remote: %d objects sent, %d PUTs, for %d objects", sent, puts, unique)
	}
	if res[0].Shared+res[1].Shared < 90 {
		t.Errorf("one Remote: %d objects shared, want the shared file's", res[0].Shared+res[1].Shared)
	}
	for _, s := range []string{"s1", "s2"} {
		b := newHost(t)
		id := mustHead(t, h, s)
		if _, err := Pull(ctx, b.store, b.cat, one, s, PullOptions{All: true}); err != nil {
			t.Fatal(err)
		}
		got, err := readFiles(t, b.store, b.cat, id)
		if err != nil || !bytes.Equal(got["shared.bin"], shared) {
			t.Fatalf("%s pulled back: %v", s, err)
		}
	}

	bucket := srv.Bucket(t)
	two := [2]*Remote{openRemote(t, srv, bucket), openRemote(t, srv, bucket)}
	res = pushBoth(t, h, two[0], two[1])
	unique = bucketObjects(t, two[0])
	sent = res[0].Uploaded + res[1].Uploaded
	t.Logf("two Remotes: %d objects on the bucket, %d sent", unique, sent)
	if sent*10 < unique*18 {
		t.Errorf("two Remotes sent %d objects for %d: the pushes did not overlap", sent, unique)
	}
}
