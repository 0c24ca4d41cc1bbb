package remote

import (
	"context"
	"errors"
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
