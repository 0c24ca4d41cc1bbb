package remote

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// object is one listed object: its name under its dir, stored size and
// the server's last-modified time.
type object struct {
	name     string
	size     int64
	modified time.Time
}

// listObjects calls fn, in key order, with every object under dir.
func (r *Remote) listObjects(ctx context.Context, dir string, fn func(object) error) error {
	if err := r.keyReady(ctx); err != nil {
		return err
	}
	p := r.prefix + dir
	var token *string
	for {
		var page *s3.ListObjectsV2Output
		err := r.do(ctx, "list "+p, func(ctx context.Context) error {
			r.lists.Add(1)
			var err error
			page, err = r.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &r.bucket, Prefix: &p, ContinuationToken: token})
			return err
		})
		if err != nil {
			return r.listErr(p, err)
		}
		for _, o := range page.Contents {
			obj := object{name: strings.TrimPrefix(aws.ToString(o.Key), p), size: aws.ToInt64(o.Size), modified: aws.ToTime(o.LastModified)}
			if err := fn(obj); err != nil {
				return err
			}
		}
		if !aws.ToBool(page.IsTruncated) || aws.ToString(page.NextContinuationToken) == "" {
			return nil
		}
		token = page.NextContinuationToken
	}
}

// deleteObject removes key; a missing key is success (S3 answers 204
// either way).
func (r *Remote) deleteObject(ctx context.Context, key string) error {
	if err := r.keyReady(ctx); err != nil {
		return err
	}
	err := r.do(ctx, "delete "+key, func(ctx context.Context) error {
		_, err := r.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &r.bucket, Key: &key})
		return err
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("remote %s: delete %s: %w", r.cfg.Name, key, err)
	}
	return nil
}

// chunkSizes lists the chunks directory: every chunk's stored size, by
// object name (chunkName of its ref).
func (r *Remote) chunkSizes(ctx context.Context) (map[string]int64, error) {
	sizes := make(map[string]int64)
	err := r.listObjects(ctx, chunksDir, func(o object) error {
		if isFullID(o.name) {
			sizes[o.name] = o.size
		}
		return nil
	})
	return sizes, err
}

// recordNames lists the names of the records (their ids on a plain
// remote).
func (r *Remote) recordNames(ctx context.Context) ([]string, error) {
	var names []string
	_, err := r.list(ctx, snapshotsDir, "", 0, func(name string) error {
		if isFullID(name) {
			names = append(names, name)
		}
		return nil
	})
	return names, err
}

// deleteNames deletes the objects names under dir, Parallel at a time.
func (r *Remote) deleteNames(ctx context.Context, dir string, names []string) error {
	return parallel(ctx, r.parallel, len(names), func(ctx context.Context, i int) error {
		return r.deleteObject(ctx, r.prefix+dir+names[i])
	})
}

// records reads every snapshot record on the remote, by id. A record that
// vanishes between the listing and its read (a forget on another host) is
// left out.
func (r *Remote) records(ctx context.Context) (map[string]*manifest.Snapshot, error) {
	if r.crypt != nil {
		return r.sealedRecords(ctx)
	}
	ids, err := r.Snapshots(ctx, "")
	if err != nil {
		return nil, err
	}
	snaps := make([]*manifest.Snapshot, len(ids))
	err = parallel(ctx, r.parallel, len(ids), func(ctx context.Context, i int) error {
		_, s, err := r.Snapshot(ctx, ids[i])
		if err == nil || errors.Is(err, ErrNoSnapshot) {
			snaps[i] = s
			return nil
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make(map[string]*manifest.Snapshot, len(ids))
	for i, s := range snaps {
		if s != nil {
			out[ids[i]] = s
		}
	}
	return out, nil
}

// reach adds to seen every node and chunk the trees under roots reach,
// reading the nodes from the remote (each verified by hash), level by
// level, Parallel at a time. A node it cannot read fails the walk: a
// caller deciding what to delete must not decide on a partial answer.
func (r *Remote) reach(ctx context.Context, roots []cas.Ref, seen map[cas.Ref]struct{}) error {
	kinds := make(map[cas.Ref]manifest.RefKind)
	var frontier []cas.Ref
	for _, root := range roots {
		if _, ok := seen[root]; !ok {
			seen[root] = struct{}{}
			kinds[root] = manifest.TreeNode
			frontier = append(frontier, root)
		}
	}
	for len(frontier) > 0 {
		next, err := r.reachLevel(ctx, frontier, kinds, seen)
		if err != nil {
			return err
		}
		frontier = next
	}
	return nil
}

// reachLevel reads one level of reach's walk and returns the next: the
// nodes below it not seen before.
func (r *Remote) reachLevel(ctx context.Context, level []cas.Ref, kinds map[cas.Ref]manifest.RefKind, seen map[cas.Ref]struct{}) ([]cas.Ref, error) {
	var (
		mu   sync.Mutex
		next []cas.Ref
	)
	add := func(ref cas.Ref, kind manifest.RefKind) {
		if ref.IsZero() {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if _, ok := seen[ref]; ok {
			return
		}
		seen[ref] = struct{}{}
		if kind != manifest.Chunk {
			kinds[ref] = kind
			next = append(next, ref)
		}
	}
	err := parallel(ctx, r.parallel, len(level), func(ctx context.Context, i int) error {
		ref := level[i]
		mu.Lock()
		kind := kinds[ref]
		mu.Unlock()
		data, err := r.GetChunk(ctx, ref)
		if err != nil {
			return fmt.Errorf("%s node %s: %w", kind, ref.Short(), err)
		}
		if err := nodeRefs(kind, data, add); err != nil {
			return fmt.Errorf("%s node %s: %w: %w", kind, ref.Short(), cas.ErrCorrupt, err)
		}
		return nil
	})
	return next, err
}
