package remote

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/stored"
	"github.com/homefs/homefs/internal/remote/objstore"
	"github.com/homefs/homefs/manifest"
)

// Options tune a Remote. Open must be set (s3.Open); the zero values of
// the other fields are ready for production.
type Options struct {
	// Open opens a remote's object store.
	Open objstore.Opener
	// Credentials override the environment and the credentials files.
	Credentials *Credentials
	// Timeouts bound connects, silences, attempts and retries.
	Timeouts Timeouts
	// MaxAttempts caps the attempts of one request, retries included; 0
	// leaves it to Timeouts.RetryTotal. MaxBackoff caps the wait between
	// two (0 means 5s).
	MaxAttempts int
	MaxBackoff  time.Duration
	// Parallel bounds the requests one operation keeps in flight; 0
	// means 16.
	Parallel int
	Logger   *slog.Logger
}

type (
	// Credentials are static keys.
	Credentials = objstore.Credentials
	// Stats counts requests and payload bytes since the Remote was
	// opened.
	Stats = objstore.Stats
	// Timeouts bound every wait on a remote (objstore.Timeouts).
	Timeouts = objstore.Timeouts
)

// Default timeouts.
const (
	DefaultConnectTimeout = objstore.DefaultConnectTimeout
	DefaultIdleTimeout    = objstore.DefaultIdleTimeout
	DefaultRequestTimeout = objstore.DefaultRequestTimeout
	DefaultRetryTotal     = objstore.DefaultRetryTotal
)

// Remote is one bucket and prefix. It is safe for concurrent use.
type Remote struct {
	cfg      Config
	prefix   string // "" or "p/" with a trailing slash
	objects  objstore.Store
	parallel int
	log      *slog.Logger
	crypt    *sealer // nil for a plain remote
	uploads  *uploads
}

// Open returns a client for the remote cfg. It does not contact the server.
func Open(ctx context.Context, cfg Config, opts Options) (*Remote, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Open == nil {
		return nil, fmt.Errorf("remote %s: no object store to open it with (Options.Open)", cfg.Name)
	}
	bucket, prefix, _ := ParseURL(cfg.URL)
	if prefix != "" {
		prefix += "/"
	}
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = 16
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	store, err := opts.Open(ctx, objstore.Options{
		Name: cfg.Name, Bucket: bucket, Endpoint: cfg.Endpoint, Region: cfg.Region, Profile: cfg.Profile,
		Credentials: opts.Credentials,
		Timeouts:    opts.Timeouts, MaxAttempts: opts.MaxAttempts, MaxBackoff: opts.MaxBackoff,
		Parallel: parallel, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	var crypt *sealer
	if cfg.Encryption.Enabled() {
		master, err := loadKey(ctx, cfg.Encryption, cfg.Name)
		if err != nil {
			return nil, err
		}
		crypt, err = newSealer(master)
		clear(master)
		if err != nil {
			return nil, err
		}
	}
	return &Remote{
		cfg:      cfg,
		prefix:   prefix,
		objects:  store,
		parallel: parallel,
		log:      log,
		crypt:    crypt,
		uploads:  newUploads(),
	}, nil
}

// Name is the remote's configured name.
func (r *Remote) Name() string { return r.cfg.Name }

// Config returns the remote's configuration.
func (r *Remote) Config() Config { return r.cfg }

// Stats returns the request and byte counters.
func (r *Remote) Stats() Stats { return r.objects.Stats() }

// Layout of keys under the prefix.
const (
	chunksDir    = "chunks/"
	snapshotsDir = "snapshots/"
	headsDir     = "heads/"
)

// Object names: a plain remote uses the plain names (a ref's hex, a
// snapshot id, a session name), an encrypted one their HMACs
// (objectName).
func (r *Remote) chunkName(ref cas.Ref) string { return r.objectName(chunksDir, ref.Hex()) }
func (r *Remote) chunkKey(ref cas.Ref) string  { return r.prefix + chunksDir + r.chunkName(ref) }
func (r *Remote) recordKey(id string) string {
	return r.prefix + snapshotsDir + r.objectName(snapshotsDir, id)
}
func (r *Remote) headKey(session string) string {
	return r.prefix + headsDir + r.objectName(headsDir, session)
}

// maxStored bounds a chunk's stored form: the largest plain chunk plus the
// codec header (zstd never grows a chunk: it is stored raw then).
const maxStored = cas.MaxChunkSize + 16

// getObject returns an object's plain body (at most limit bytes) and
// ETag.
func (r *Remote) getObject(ctx context.Context, key string, limit int64) ([]byte, string, error) {
	if err := r.keyReady(ctx); err != nil {
		return nil, "", err
	}
	b, etag, err := r.fetch(ctx, key, limit+r.overhead())
	if err != nil {
		return nil, "", err
	}
	b, err = r.open(key, b)
	return b, etag, err
}

// fetch returns an object's body as stored (at most limit bytes) and
// ETag.
func (r *Remote) fetch(ctx context.Context, key string, limit int64) ([]byte, string, error) {
	body, etag, err := r.objects.Get(ctx, key, limit)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, "", fmt.Errorf("remote %s: %s: %w", r.cfg.Name, key, cas.ErrNotFound)
	}
	if err != nil {
		return nil, "", err
	}
	if int64(len(body)) > limit {
		return nil, "", fmt.Errorf("remote %s: %s: over %d bytes: %w", r.cfg.Name, key, limit, cas.ErrCorrupt)
	}
	return body, etag, nil
}

// putObject writes body under key (sealed, on an encrypted remote).
// ifMatch "" and ifNoneMatch false make it unconditional. It returns the
// new ETag.
func (r *Remote) putObject(ctx context.Context, key string, body []byte, contentType, ifMatch string, ifNoneMatch bool) (string, error) {
	if err := r.keyReady(ctx); err != nil {
		return "", err
	}
	if r.crypt != nil {
		body, contentType = r.seal(key, body), "application/octet-stream"
	}
	return r.store(ctx, key, body, contentType, ifMatch, ifNoneMatch)
}

// store writes body under key as it is.
func (r *Remote) store(ctx context.Context, key string, body []byte, contentType, ifMatch string, ifNoneMatch bool) (string, error) {
	etag, err := r.objects.Put(ctx, key, body, contentType, objstore.Cond{IfMatch: ifMatch, IfNoneMatch: ifNoneMatch})
	if errors.Is(err, objstore.ErrPrecondition) {
		return "", fmt.Errorf("remote %s: put %s: %w", r.cfg.Name, key, ErrConflict)
	}
	return etag, err
}

// hasObject reports whether key exists.
func (r *Remote) hasObject(ctx context.Context, key string) (bool, error) {
	if err := r.keyReady(ctx); err != nil {
		return false, err
	}
	return r.objects.Exists(ctx, key)
}

// list calls fn, in key order, with the name (the key without prefix and
// dir) of every object under dir whose name starts with start. With
// maxPages > 0 it stops after that many pages; complete reports whether it
// reached the end.
func (r *Remote) list(ctx context.Context, dir, start string, maxPages int, fn func(name string) error) (complete bool, err error) {
	if err := r.keyReady(ctx); err != nil {
		return false, err
	}
	p := r.prefix + dir + start
	token := ""
	for pages := 0; ; pages++ {
		if maxPages > 0 && pages == maxPages {
			return false, nil
		}
		objs, next, err := r.objects.List(ctx, p, token, 0)
		if err != nil {
			return false, err
		}
		for _, o := range objs {
			if err := fn(strings.TrimPrefix(o.Key, r.prefix+dir)); err != nil {
				return false, err
			}
		}
		if next == "" {
			return true, nil
		}
		token = next
	}
}

// Ping checks that the remote answers and lets this host list it: one
// listing of at most one key under its prefix, not retried, bounded by
// ctx (status uses it with a short timeout) and the request timeout.
func (r *Remote) Ping(ctx context.Context) error {
	return r.objects.Ping(ctx, r.prefix)
}

// GetChunk fetches a chunk or node and returns its plain bytes after
// checking them against ref. A missing object wraps cas.ErrNotFound,
// damaged bytes cas.ErrCorrupt.
func (r *Remote) GetChunk(ctx context.Context, ref cas.Ref) ([]byte, error) {
	form, _, err := r.getObject(ctx, r.chunkKey(ref), maxStored)
	if err != nil {
		return nil, err
	}
	plain, err := stored.Decode(ref, form)
	if err != nil {
		return nil, fmt.Errorf("remote %s: %w", r.cfg.Name, err)
	}
	return plain, nil
}

// PutChunk uploads the stored form of the chunk ref. Chunks are immutable
// and named by content, so an overwrite by another host writes the same
// bytes.
func (r *Remote) PutChunk(ctx context.Context, ref cas.Ref, stored []byte) error {
	_, err := r.putObject(ctx, r.chunkKey(ref), stored, "application/octet-stream", "", false)
	return err
}

// HasChunks reports which refs the remote holds, with up to Parallel
// HeadObject requests in flight.
func (r *Remote) HasChunks(ctx context.Context, refs []cas.Ref) ([]bool, error) {
	has := make([]bool, len(refs))
	err := parallel(ctx, r.parallel, len(refs), func(ctx context.Context, i int) error {
		ok, err := r.hasObject(ctx, r.chunkKey(refs[i]))
		has[i] = ok
		return err
	})
	return has, err
}

// Snapshot fetches the record of snapshot id (a full id) and checks it.
func (r *Remote) Snapshot(ctx context.Context, id string) ([]byte, *manifest.Snapshot, error) {
	b, _, err := r.getObject(ctx, r.recordKey(id), manifest.MaxSnapshotSize)
	if errors.Is(err, cas.ErrNotFound) {
		return nil, nil, fmt.Errorf("remote %s: snapshot %s: %w", r.cfg.Name, id, ErrNoSnapshot)
	}
	if err != nil {
		return nil, nil, err
	}
	if got := manifest.SnapshotID(b); got != id {
		return nil, nil, fmt.Errorf("remote %s: snapshot %s: %w: record hashes to %s", r.cfg.Name, id, cas.ErrCorrupt, got)
	}
	snap, err := manifest.DecodeSnapshot(b)
	if err != nil {
		return nil, nil, fmt.Errorf("remote %s: snapshot %s: %w: %w", r.cfg.Name, id, cas.ErrCorrupt, err)
	}
	return b, snap, nil
}

// HasSnapshot reports whether the remote holds the record of id.
func (r *Remote) HasSnapshot(ctx context.Context, id string) (bool, error) {
	return r.hasObject(ctx, r.recordKey(id))
}

// putSnapshot uploads a record. It is create-only: a record is named by
// its content, so finding it present means another push wrote the same
// bytes, which is success.
func (r *Remote) putSnapshot(ctx context.Context, id string, record []byte) error {
	_, err := r.putObject(ctx, r.recordKey(id), record, "application/json", "", true)
	if errors.Is(err, ErrConflict) {
		return nil
	}
	return err
}

// replaceSnapshot overwrites a damaged record (a repair). The bytes are
// the ones the id names, so whatever another host writes there is the
// same.
func (r *Remote) replaceSnapshot(ctx context.Context, id string, record []byte) error {
	_, err := r.putObject(ctx, r.recordKey(id), record, "application/json", "", false)
	return err
}

// Snapshots lists the ids of the remote's snapshots that start with
// prefix (all of them for "").
func (r *Remote) Snapshots(ctx context.Context, prefix string) ([]string, error) {
	if r.crypt != nil {
		return r.sealedSnapshots(ctx, prefix)
	}
	var ids []string
	_, err := r.list(ctx, snapshotsDir, prefix, 0, func(name string) error {
		if isFullID(name) {
			ids = append(ids, name)
		}
		return nil
	})
	return ids, err
}

// headVersion is the version of a remote head's encoding.
const headVersion = 1

// Head is a session's head on a remote: the last snapshot pushed.
type Head struct {
	Version   int    `json:"version"`
	Session   string `json:"session"`
	Snapshot  string `json:"snapshot"`
	UpdatedNs int64  `json:"updated_ns"`
	// ETag is the object's version as read; SetHead expects it.
	ETag string `json:"-"`
}

// getVersioned reads a small object that moves by conditional puts (a
// head, a lease) with the ETag that goes with its body. Such an object put
// with PutObject has the MD5 of its content as ETag (on S3 and the
// gateways we test with). A server that reads content and ETag in two
// steps can pair an old body with a new ETag; a conditional put with that
// ETag would overwrite a racing host's write unseen. So it reads again
// while they disagree; an ETag that is not an MD5 (SSE-KMS) is taken as it
// is.
//
// On an encrypted remote the ETag is the sealed bytes' MD5, and so are
// the conditions of later puts.
func (r *Remote) getVersioned(ctx context.Context, key string) ([]byte, string, error) {
	if err := r.keyReady(ctx); err != nil {
		return nil, "", err
	}
	for attempt := 0; ; attempt++ {
		b, etag, err := r.fetch(ctx, key, 64<<10+r.overhead())
		if err != nil {
			return nil, "", err
		}
		if etagMatches(etag, b) || attempt == 4 {
			b, err = r.open(key, b)
			return b, etag, err
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 10 * time.Millisecond):
		}
	}
}

// Head returns the remote head of session; an absent head wraps
// ErrNoSnapshot.
func (r *Remote) Head(ctx context.Context, session string) (*Head, error) {
	if err := manifest.ValidateSessionName(session); err != nil {
		return nil, fmt.Errorf("remote %s: head %q: %w", r.cfg.Name, session, err)
	}
	b, etag, err := r.getVersioned(ctx, r.headKey(session))
	if errors.Is(err, cas.ErrNotFound) {
		return nil, fmt.Errorf("remote %s: session %s has no head: %w", r.cfg.Name, session, ErrNoSnapshot)
	}
	if err != nil {
		return nil, err
	}
	h, err := decodeHead(b)
	if err != nil || h.Session != session {
		return nil, fmt.Errorf("remote %s: head of %s: %w: undecodable or foreign head", r.cfg.Name, session, cas.ErrCorrupt)
	}
	h.ETag = etag
	return h, nil
}

func decodeHead(b []byte) (*Head, error) {
	var h Head
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return nil, err
	}
	if h.Version != headVersion || !isFullID(h.Snapshot) {
		return nil, errors.New("not a version 1 head")
	}
	return &h, nil
}

// SetHead points the remote head of session at snapshot id. With prev nil
// the head must not exist (If-None-Match: *); otherwise it must still hold
// prev.ETag (If-Match). Losing either race is ErrConflict.
func (r *Remote) SetHead(ctx context.Context, session, id string, prev *Head) (*Head, error) {
	h := &Head{Version: headVersion, Session: session, Snapshot: id, UpdatedNs: time.Now().UnixNano()}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	ifMatch := ""
	if prev != nil {
		if prev.ETag == "" {
			return nil, fmt.Errorf("remote %s: head of %s: read without an ETag, cannot update it safely", r.cfg.Name, session)
		}
		ifMatch = prev.ETag
	}
	etag, err := r.putObject(ctx, r.headKey(session), b, "application/json", ifMatch, prev == nil)
	if errors.Is(err, ErrConflict) {
		// A retried put fails its condition when an earlier attempt went
		// through and only its answer was lost: the head then holds our
		// bytes, to the nanosecond.
		if now, herr := r.Head(ctx, session); herr == nil && now.Snapshot == id && now.UpdatedNs == h.UpdatedNs {
			etag, err = now.ETag, nil
		}
	}
	if err != nil {
		return nil, err
	}
	h.ETag = etag
	// Read the head back. S3 applies a conditional put atomically, but not
	// every S3-compatible server does (the Versity gateway's posix backend
	// was seen letting two racing If-Match puts through): a head that is no
	// longer ours was overwritten by a racing host, and we lost.
	now, err := r.Head(ctx, session)
	if err != nil {
		return nil, fmt.Errorf("remote %s: head of %s: read back: %w", r.cfg.Name, session, err)
	}
	if now.Snapshot != id || (etag != "" && now.ETag != etag) {
		return nil, fmt.Errorf("remote %s: head of %s moved to %s while it was set to %s: %w", r.cfg.Name, session, now.Snapshot[:12], id[:12], ErrConflict)
	}
	return h, nil
}

// Heads lists the sessions that have a head on the remote. An encrypted
// remote reads every head for its session's name.
func (r *Remote) Heads(ctx context.Context) ([]string, error) {
	if r.crypt != nil {
		heads, err := r.sealedHeads(ctx)
		names := make([]string, len(heads))
		for i, h := range heads {
			names[i] = h.Session
		}
		return names, err
	}
	var names []string
	_, err := r.list(ctx, headsDir, "", 0, func(name string) error {
		names = append(names, name)
		return nil
	})
	return names, err
}

func isFullID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// etagMatches reports whether etag is the MD5 of body, or is no MD5 at all
// (multipart or KMS-encrypted objects), in which case it cannot be checked.
func etagMatches(etag string, body []byte) bool {
	e := strings.Trim(etag, `"`)
	if len(e) != 32 || strings.Trim(e, "0123456789abcdef") != "" {
		return true
	}
	sum := md5.Sum(body)
	return e == hex.EncodeToString(sum[:])
}
