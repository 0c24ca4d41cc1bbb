package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/homefs/homefs/internal/remote/objstore"
)

// Store is one bucket. It is safe for concurrent use.
type Store struct {
	name     string
	bucket   string
	endpoint string // as configured; "" for AWS
	client   *awss3.Client
	log      *slog.Logger

	timeouts    objstore.Timeouts
	maxAttempts int
	maxBackoff  time.Duration

	gets, puts, heads, lists atomic.Int64
	bytesIn, bytesOut        atomic.Int64
}

var _ objstore.Store = (*Store)(nil)

// Open returns a client for the bucket opts names, with the keys of
// opts.Credentials or else those resolveCredentials finds. It does not
// contact the server. Its signature is an objstore.Opener.
func Open(ctx context.Context, opts objstore.Options) (objstore.Store, error) {
	return open(ctx, opts)
}

func open(_ context.Context, opts objstore.Options) (*Store, error) {
	var creds objstore.Credentials
	if opts.Credentials != nil {
		creds = *opts.Credentials
	} else {
		var err error
		if creds, err = resolveCredentials(opts.Name, opts.Profile); err != nil {
			return nil, err
		}
	}
	maxBackoff := opts.MaxBackoff
	if maxBackoff <= 0 {
		maxBackoff = 5 * time.Second
	}
	parallel := opts.Parallel
	if parallel <= 0 {
		parallel = 16
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	timeouts := opts.Timeouts.WithDefaults()
	s3opts := awss3.Options{
		Region:       region(opts.Region),
		Credentials:  credentials.NewStaticCredentialsProvider(creds.AccessKeyID, creds.SecretAccessKey, creds.SessionToken),
		UsePathStyle: true,
		HTTPClient:   newHTTPClient(timeouts, parallel),
		// Store.do retries, with a budget of time rather than the SDK's
		// quota of retries shared by every request.
		Retryer: aws.NopRetryer{},
		// Every body is verified by its content hash; the SDK's trailing
		// checksums add nothing and some S3-compatible servers reject them.
		RequestChecksumCalculation:                aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation:                aws.ResponseChecksumValidationWhenRequired,
		DisableLogOutputChecksumValidationSkipped: true,
	}
	if opts.Endpoint != "" {
		s3opts.BaseEndpoint = aws.String(opts.Endpoint)
	}
	return &Store{
		name:     opts.Name,
		bucket:   opts.Bucket,
		endpoint: opts.Endpoint,
		client:   awss3.New(s3opts),
		log:      log,

		timeouts:    timeouts,
		maxAttempts: opts.MaxAttempts,
		maxBackoff:  maxBackoff,
	}, nil
}

// region is the region requests are signed for: the configured one, else
// the environment's, else us-east-1.
func region(configured string) string {
	for _, r := range []string{configured, os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION")} {
		if r != "" {
			return r
		}
	}
	return "us-east-1"
}

// Stats returns the request and byte counters.
func (s *Store) Stats() objstore.Stats {
	return objstore.Stats{
		Gets: s.gets.Load(), Puts: s.puts.Load(), Heads: s.heads.Load(), Lists: s.lists.Load(),
		BytesIn: s.bytesIn.Load(), BytesOut: s.bytesOut.Load(),
	}
}

// Get returns key's body (at most limit+1 bytes of it) and ETag.
func (s *Store) Get(ctx context.Context, key string, limit int64) ([]byte, string, error) {
	var (
		body []byte
		etag string
	)
	err := s.do(ctx, "get "+key, func(ctx context.Context) error {
		s.gets.Add(1)
		out, err := s.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &s.bucket, Key: &key})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		var buf bytes.Buffer
		if out.ContentLength != nil && *out.ContentLength > 0 && *out.ContentLength <= limit {
			buf.Grow(int(*out.ContentLength))
		}
		n, err := buf.ReadFrom(io.LimitReader(out.Body, limit+1))
		s.bytesIn.Add(n)
		if err != nil {
			return fmt.Errorf("read: %w", err)
		}
		body, etag = buf.Bytes(), aws.ToString(out.ETag)
		return nil
	})
	if err != nil {
		if err := s.notThere(err); err != nil {
			return nil, "", err
		}
		if isNotFound(err) {
			return nil, "", fmt.Errorf("remote %s: %s: %w", s.name, key, objstore.ErrNotFound)
		}
		return nil, "", fmt.Errorf("remote %s: get %s: %w", s.name, key, err)
	}
	return body, etag, nil
}

// Put writes body under key if cond holds.
func (s *Store) Put(ctx context.Context, key string, body []byte, contentType string, cond objstore.Cond) (string, error) {
	var etag string
	err := s.do(ctx, "put "+key, func(ctx context.Context) error {
		in := &awss3.PutObjectInput{
			Bucket:        &s.bucket,
			Key:           &key,
			Body:          bytes.NewReader(body),
			ContentLength: aws.Int64(int64(len(body))),
			ContentType:   aws.String(contentType),
		}
		if cond.IfMatch != "" {
			in.IfMatch = aws.String(cond.IfMatch)
		}
		if cond.IfNoneMatch {
			in.IfNoneMatch = aws.String("*")
		}
		s.puts.Add(1)
		out, err := s.client.PutObject(ctx, in)
		if err != nil {
			return err
		}
		etag = aws.ToString(out.ETag)
		return nil
	})
	if err != nil {
		if cond != (objstore.Cond{}) && isPrecondition(err) {
			return "", fmt.Errorf("remote %s: put %s: %w", s.name, key, objstore.ErrPrecondition)
		}
		if nt := s.notThere(err); nt != nil {
			return "", nt
		}
		return "", fmt.Errorf("remote %s: put %s: %w", s.name, key, err)
	}
	s.bytesOut.Add(int64(len(body)))
	return etag, nil
}

// Exists reports whether key exists.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	err := s.do(ctx, "head "+key, func(ctx context.Context) error {
		s.heads.Add(1)
		_, err := s.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &s.bucket, Key: &key})
		return err
	})
	if err == nil {
		return true, nil
	}
	if isNotFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("remote %s: head %s: %w", s.name, key, err)
}

// List returns one page of the objects under prefix.
func (s *Store) List(ctx context.Context, prefix, token string, max int) ([]objstore.Object, string, error) {
	in := &awss3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix}
	if token != "" {
		in.ContinuationToken = &token
	}
	if max > 0 {
		in.MaxKeys = aws.Int32(int32(min(max, 1000)))
	}
	var page *awss3.ListObjectsV2Output
	err := s.do(ctx, "list "+prefix, func(ctx context.Context) error {
		s.lists.Add(1)
		var err error
		page, err = s.client.ListObjectsV2(ctx, in)
		return err
	})
	if err != nil {
		return nil, "", s.listErr(prefix, err)
	}
	objs := make([]objstore.Object, len(page.Contents))
	for i, o := range page.Contents {
		objs[i] = objstore.Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)}
	}
	next := ""
	if aws.ToBool(page.IsTruncated) {
		next = aws.ToString(page.NextContinuationToken)
	}
	return objs, next, nil
}

// Delete removes key; a missing key is success (S3 answers 204 either
// way).
func (s *Store) Delete(ctx context.Context, key string) error {
	err := s.do(ctx, "delete "+key, func(ctx context.Context) error {
		_, err := s.client.DeleteObject(ctx, &awss3.DeleteObjectInput{Bucket: &s.bucket, Key: &key})
		return err
	})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("remote %s: delete %s: %w", s.name, key, err)
	}
	return nil
}

// Ping lists at most one key under prefix: not retried, bounded by ctx
// (status uses it with a short timeout) and the request timeout.
func (s *Store) Ping(ctx context.Context, prefix string) error {
	s.lists.Add(1)
	ctx, cancel := context.WithTimeout(ctx, s.timeouts.Request)
	defer cancel()
	_, err := s.client.ListObjectsV2(ctx, &awss3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: &prefix, MaxKeys: aws.Int32(1)})
	if err != nil {
		return s.listErr("s3://"+s.bucket+"/"+prefix, unwrapSend(err))
	}
	return nil
}

// listErr is the error of a listing of p: a missing bucket or an
// endpoint that is no S3 server says so (notThere).
func (s *Store) listErr(p string, err error) error {
	if nt := s.notThere(err); nt != nil {
		return nt
	}
	return fmt.Errorf("remote %s: list %s: %w", s.name, p, err)
}

// notThere tells a missing bucket, and an endpoint that is no S3 server
// (a 404 that is not S3's NoSuchKey), from a missing object of a GET:
// "session has no head" is the wrong news for both. nil means neither.
func (s *Store) notThere(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket" {
		return fmt.Errorf("remote %s: bucket %s does not exist at %s (create it, or fix the remote's URL): %w", s.name, s.bucket, s.endpointName(), objstore.ErrNoBucket)
	}
	// A GET of a missing object is NoSuchKey on every S3 server; any
	// other 404 (a web server's page) comes from something else.
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound && (!errors.As(err, &ae) || ae.ErrorCode() != "NoSuchKey") {
		return fmt.Errorf("remote %s: %s answered 404 without an S3 error (is it an S3 endpoint?): %w", s.name, s.endpointName(), objstore.ErrNotS3)
	}
	return nil
}

// endpointName is the endpoint as a user gave it.
func (s *Store) endpointName() string {
	if s.endpoint != "" {
		return s.endpoint
	}
	return "the default S3 endpoint"
}

// isNotFound reports a 404 in any of its S3 spellings.
func isNotFound(err error) bool {
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return true
	}
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound":
			return true
		}
	}
	return false
}

// isPrecondition reports a failed conditional write: 412, or the 409 that
// S3 returns when two conditional writes race.
func isPrecondition(err error) bool {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		switch re.HTTPStatusCode() {
		case http.StatusPreconditionFailed:
			return true
		case http.StatusConflict:
			var ae smithy.APIError
			return errors.As(err, &ae) && ae.ErrorCode() == "ConditionalRequestConflict"
		}
	}
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "PreconditionFailed"
}
