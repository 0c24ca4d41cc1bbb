package remotetypes

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/homefs/homefs/cas"
)

var (
	// ErrConflict: a session head on the remote changed since it was read,
	// or does not lie on the pushed snapshot's lineage. It wraps
	// cas.ErrConflict.
	ErrConflict = fmt.Errorf("remote: head changed concurrently: %w", cas.ErrConflict)
	// ErrNoSnapshot: the remote holds no such snapshot (or no head for a
	// session).
	ErrNoSnapshot = fmt.Errorf("remote: no such snapshot: %w", cas.ErrNotFound)
	// ErrNoBucket: the remote's bucket does not exist.
	ErrNoBucket = errors.New("remote: no such bucket")
	// ErrNotS3: the endpoint answered, but not as an S3 server does.
	ErrNotS3 = errors.New("remote: the endpoint does not answer as S3")
	// ErrNoCredentials: neither the environment nor a credentials file
	// holds keys for the remote.
	ErrNoCredentials = errors.New("remote: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or write them to a shared credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials)")
	// ErrStalled is wrapped by the error of a connection that moved no
	// byte for the S3 client's Timeouts.Idle while a request was on it.
	// The error is a *net.OpError (a network failure to whoever maps
	// errors: EIO in fusefs).
	ErrStalled = errors.New("no byte moved")
)

var (
	// ErrNoRemote: no remote of that name is configured.
	ErrNoRemote = errors.New("remote: no such remote")
	// ErrRemoteExists: a remote of that name is already configured.
	ErrRemoteExists = errors.New("remote: a remote of that name exists")
)

var (
	// ErrWrongKey: the remote's key check object does not open with the
	// configured key.
	ErrWrongKey = errors.New("remote: wrong encryption key")
	// ErrKeySource: the key could not be read from its source, or is not
	// 32 bytes.
	ErrKeySource = errors.New("remote: encryption key unavailable")
	// ErrEncrypted: a plain client met an encrypted remote.
	ErrEncrypted = errors.New("remote: the remote is encrypted")
	// ErrNotEncrypted: an encrypted client met a prefix that holds objects
	// but no key check (a plain remote's).
	ErrNotEncrypted = errors.New("remote: the prefix holds objects of a remote that is not encrypted")
)

var (
	// ErrLeased: another host holds the session's lease and it has not
	// expired. The error that wraps it names the holder and the expiry.
	ErrLeased = errors.New("remote: session is leased by another host")
	// ErrNoLease: the remote holds no lease object for the session.
	ErrNoLease = fmt.Errorf("remote: no lease: %w", cas.ErrNotFound)
)

const (
	// MinLeaseTTL keeps renewals (every ttl/3) from flooding the remote.
	MinLeaseTTL = time.Second
	// DefaultLeaseTTL is the lease lifetime when none is given.
	DefaultLeaseTTL = 10 * time.Minute
)

// Config describes one remote. It holds no secrets (an encrypted
// remote's key is named by its source, never held), so it can be stored
// (remotes.json) and printed.
type Config struct {
	Name string `json:"name"`
	// URL is s3://BUCKET[/PREFIX].
	URL string `json:"url"`
	// Endpoint is the S3 endpoint URL (http://127.0.0.1:7070,
	// https://s3.eu-west-1.amazonaws.com); empty means AWS for Region.
	Endpoint string `json:"endpoint,omitempty"`
	// Region signs requests; empty means AWS_REGION or us-east-1.
	Region string `json:"region,omitempty"`
	// Profile selects a section of the shared credentials file, whose
	// keys then win over the environment's; empty means the environment's
	// keys, else AWS_PROFILE or "default".
	Profile string `json:"profile,omitempty"`
	// Encryption, when set, seals every object and hides their names
	// under a key from the named source (crypt.go).
	Encryption Encryption `json:"encryption,omitzero"`
}

// ParseURL splits s3://BUCKET/PREFIX into bucket and prefix (without
// slashes at either end).
func ParseURL(s string) (bucket, prefix string, err error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", "", fmt.Errorf("remote: url %q: %w", s, err)
	}
	if u.Scheme != "s3" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return "", "", fmt.Errorf("remote: url %q: want s3://BUCKET[/PREFIX]", s)
	}
	prefix = strings.TrimSuffix(strings.TrimPrefix(u.Path, "/"), "/")
	for _, part := range strings.Split(prefix, "/") {
		if prefix != "" && (part == "" || part == "." || part == "..") {
			return "", "", fmt.Errorf("remote: url %q: bad prefix segment %q", s, part)
		}
	}
	return u.Host, prefix, nil
}

// Validate checks the config without contacting the remote.
func (c Config) Validate() error {
	if c.Name == "" || strings.ContainsAny(c.Name, "/ \t\n") {
		return fmt.Errorf("remote: name %q: want a non-empty word without slashes or spaces", c.Name)
	}
	if _, _, err := ParseURL(c.URL); err != nil {
		return err
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("remote %s: endpoint %q: want http(s)://HOST[:PORT]", c.Name, c.Endpoint)
		}
	}
	return c.Encryption.validate(c.Name)
}

// Encryption says where an encrypted remote's key comes from: one of a
// file, an environment variable of the daemon or a command the daemon
// runs (sh -c), each yielding 32 bytes (raw, 64 hex digits or base64).
// The zero value is a plain remote. The key itself is never stored.
type Encryption struct {
	KeyFile    string `json:"key_file,omitempty"`
	KeyEnv     string `json:"key_env,omitempty"`
	KeyCommand string `json:"key_command,omitempty"`
}

// Enabled reports whether the remote is encrypted.
func (e Encryption) Enabled() bool { return e != Encryption{} }

// String names the key's source, for messages and listings.
func (e Encryption) String() string {
	switch {
	case e.KeyFile != "":
		return "key file " + e.KeyFile
	case e.KeyEnv != "":
		return "key env " + e.KeyEnv
	case e.KeyCommand != "":
		return "key command"
	}
	return "none"
}

func (e Encryption) validate(name string) error {
	n := 0
	for _, s := range []string{e.KeyFile, e.KeyEnv, e.KeyCommand} {
		if s != "" {
			n++
		}
	}
	switch {
	case n > 1:
		return fmt.Errorf("remote %s: encryption: give one key source (a file, an environment variable or a command), not %d", name, n)
	case e.KeyFile != "" && !filepath.IsAbs(e.KeyFile):
		return fmt.Errorf("remote %s: key file %q: want an absolute path (the daemon reads it)", name, e.KeyFile)
	case e.KeyEnv != "" && strings.ContainsAny(e.KeyEnv, "= \t\n"):
		return fmt.Errorf("remote %s: key env %q: want a variable name", name, e.KeyEnv)
	}
	return nil
}

// Holder names a lease's holder: a host name for people, and the stable
// id of the daemon's root, which tells two daemons on one host apart.
type Holder struct {
	Host string `json:"host"`
	ID   string `json:"id"`
}

func (h Holder) String() string { return fmt.Sprintf("%s (id %s)", h.Host, h.ID) }

// SessionInfo is one session as the remote holds it: its head (if any)
// and the snapshot records that name it.
type SessionInfo struct {
	Session string `json:"session"`
	// Head is the snapshot the session's head names; "" for a session
	// with records but no head (a purge cut short, or pushes that never
	// moved one).
	Head string `json:"head,omitempty"`
	// HeadUpdated is when the head was last moved (the pushing host's
	// clock).
	HeadUpdated time.Time `json:"head_updated,omitzero"`
	// Snapshots counts the session's records on the remote.
	Snapshots int `json:"snapshots"`
	// Objects and Bytes are the chunks and nodes its records reach, Bytes
	// in stored (compressed) size; HeadBytes is what the head alone
	// reaches. Objects shared with other sessions count for each.
	Objects   int   `json:"objects"`
	Bytes     int64 `json:"bytes"`
	HeadBytes int64 `json:"head_bytes"`
}

// Reach names what reaches a damaged object: a snapshot whose tree names
// it, with the snapshot's session; for a head or a record, the session
// whose head reaches it (and the record's id).
type Reach struct {
	Snapshot string `json:"snapshot,omitempty"`
	Session  string `json:"session"`
}

// ObjectProblem is one missing or damaged object on a remote.
type ObjectProblem struct {
	Key   string  `json:"key"`  // the object's key in the bucket
	Kind  string  `json:"kind"` // head, record, tree, index or chunk
	Ref   cas.Ref `json:"ref,omitzero"`
	State string  `json:"state"` // StateMissing or StateDamaged
	Err   string  `json:"error"`
	// Reached lists what reaches the object, in the order fsck met them.
	Reached []Reach `json:"reached_by"`
}

func (p ObjectProblem) String() string {
	by := make([]string, len(p.Reached))
	for i, r := range p.Reached {
		switch {
		case r.Snapshot == "":
			by[i] = "head of " + r.Session
		case p.Kind == "record":
			by[i] = fmt.Sprintf("head of %s (snapshot %s)", r.Session, r.Snapshot[:12])
		default:
			by[i] = fmt.Sprintf("snapshot %s (session %s)", r.Snapshot[:12], r.Session)
		}
	}
	return fmt.Sprintf("%s %s %s: reached by %s: %s", p.State, p.Kind, p.Key, strings.Join(by, ", "), p.Err)
}

// FsckReport is the outcome of a remote fsck.
type FsckReport struct {
	Remote    string          `json:"remote"`
	Heads     int             `json:"heads"`     // heads read
	Snapshots int             `json:"snapshots"` // records read intact
	Objects   int64           `json:"objects"`   // distinct nodes and chunks read
	Bytes     int64           `json:"bytes"`     // their plain bytes
	Problems  []ObjectProblem `json:"problems"`  // by key
}

// GCResult says what a remote gc kept and deleted.
type GCResult struct {
	Remote string `json:"remote"`
	// Heads is how many heads it marked from; WaitedPushes how many
	// pushes in progress it waited for before marking.
	Heads        int `json:"heads"`
	WaitedPushes int `json:"waited_pushes"`
	// Records and Chunks count what was kept (chunks include tree and
	// index nodes); Kept is their stored size.
	Records int   `json:"records"`
	Chunks  int   `json:"chunks"`
	Kept    int64 `json:"kept_bytes"`
	// DeletedRecords, DeletedChunks and DeletedBytes (stored size) count
	// what it deleted.
	DeletedRecords int           `json:"deleted_records"`
	DeletedChunks  int           `json:"deleted_chunks"`
	DeletedBytes   int64         `json:"deleted_bytes"`
	Duration       time.Duration `json:"duration_ns"`
}
