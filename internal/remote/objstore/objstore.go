package objstore

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/homefs/homefs/internal/remote/remotetypes"
)

var (
	// ErrNotFound: Get of a missing object.
	ErrNotFound = errors.New("no such object")
	// ErrPrecondition: a conditional Put whose condition did not hold.
	ErrPrecondition = errors.New("precondition failed")
	// ErrUnavailable is wrapped by the error of a request whose last
	// attempt failed in a way a later one might not (refused, reset,
	// silent, 5xx, throttled), beside that attempt's own error.
	ErrUnavailable = errors.New("the remote did not answer")
	// The errors a store meets that its remote's users tell apart live
	// in remotetypes, which the CLI links without this package's slog.
	ErrNoBucket      = remotetypes.ErrNoBucket
	ErrNotS3         = remotetypes.ErrNotS3
	ErrNoCredentials = remotetypes.ErrNoCredentials
	ErrStalled       = remotetypes.ErrStalled
)

// Store is one bucket of an object store. Keys are full keys (the
// remote's prefix included). It is safe for concurrent use.
type Store interface {
	// Get returns key's body and ETag. It reads at most limit+1 bytes,
	// so that the caller can tell an object over limit. A missing object
	// wraps ErrNotFound.
	Get(ctx context.Context, key string, limit int64) (body []byte, etag string, err error)
	// Put writes body under key if cond holds (ErrPrecondition if not)
	// and returns the new ETag.
	Put(ctx context.Context, key string, body []byte, contentType string, cond Cond) (etag string, err error)
	// Exists reports whether key exists.
	Exists(ctx context.Context, key string) (bool, error)
	// List returns one page of the objects whose keys start with prefix,
	// in key order, from token ("" for the first page), at most max
	// (0: the server's page size). next is "" after the last page.
	List(ctx context.Context, prefix, token string, max int) (objs []Object, next string, err error)
	// Delete removes key; a missing key is success.
	Delete(ctx context.Context, key string) error
	// Ping lists at most one key under prefix, once (not retried), to
	// check that the store answers and lets this host list it.
	Ping(ctx context.Context, prefix string) error
	// Stats returns the request and byte counters.
	Stats() Stats
}

// Cond is the condition of a Put. The zero value is unconditional.
type Cond struct {
	// IfMatch: the object must still have this ETag.
	IfMatch string
	// IfNoneMatch: the object must not exist.
	IfNoneMatch bool
}

// Object is one listed object.
type Object struct {
	Key      string
	Size     int64 // as stored
	Modified time.Time
}

// Stats counts requests and payload bytes since the Store was opened.
// Every attempt of a request counts.
type Stats struct {
	Gets, Puts, Heads, Lists int64
	BytesIn, BytesOut        int64 // object bodies only
}

// Credentials are static keys.
type Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
}

// Options open a Store for one remote.
type Options struct {
	// Name is the remote's name, for errors and logs.
	Name string
	// Bucket is the bucket's name.
	Bucket string
	// Endpoint is the endpoint URL; empty means AWS for Region.
	Endpoint string
	// Region signs requests; empty means AWS_REGION or us-east-1.
	Region string
	// Profile selects a section of the shared credentials file (see
	// remote.Config.Profile).
	Profile string
	// Credentials, when set, override the environment and the files.
	Credentials *Credentials
	// Timeouts bound connects, silences, attempts and retries.
	Timeouts Timeouts
	// MaxAttempts caps the attempts of one request, retries included; 0
	// leaves it to Timeouts.RetryTotal. MaxBackoff caps the wait between
	// two (0 means 5s).
	MaxAttempts int
	MaxBackoff  time.Duration
	// Parallel is how many requests the caller keeps in flight (sizes
	// the connection pool); 0 means 16.
	Parallel int
	Logger   *slog.Logger
}

// Opener opens a Store (s3.Open). It does not contact the server.
type Opener func(ctx context.Context, opts Options) (Store, error)

// Timeouts bound every wait on a remote. The zero value means the
// defaults; a negative RetryTotal turns retries off.
type Timeouts struct {
	// Connect bounds a TCP connect and a TLS handshake; 0 means 10s.
	Connect time.Duration
	// Idle bounds how long a connection with a request on it may move no
	// byte in either direction (a server that accepts and never answers,
	// one frozen mid-body); 0 means 20s.
	Idle time.Duration
	// Request bounds one attempt of one request, body included; 0 means
	// 2m.
	Request time.Duration
	// RetryTotal is how long after a request's first attempt transient
	// failures (connection refused or reset, timeouts, 5xx, throttling)
	// are retried, with jittered exponential backoff; 0 means 60s, long
	// enough to ride out a server restart.
	RetryTotal time.Duration
}

// Default timeouts.
const (
	DefaultConnectTimeout = 10 * time.Second
	DefaultIdleTimeout    = 20 * time.Second
	DefaultRequestTimeout = 2 * time.Minute
	DefaultRetryTotal     = 60 * time.Second
)

// WithDefaults fills the zero fields.
func (t Timeouts) WithDefaults() Timeouts {
	if t.Connect <= 0 {
		t.Connect = DefaultConnectTimeout
	}
	if t.Idle <= 0 {
		t.Idle = DefaultIdleTimeout
	}
	if t.Request <= 0 {
		t.Request = DefaultRequestTimeout
	}
	if t.RetryTotal == 0 {
		t.RetryTotal = DefaultRetryTotal
	}
	return t
}
