package remote

import "github.com/homefs/homefs/internal/remote/remotetypes"

// The remote's value types, limits and errors live in remotetypes, which
// the CLI links without the rest of this package; these are their names
// here.

type (
	Config        = remotetypes.Config
	Encryption    = remotetypes.Encryption
	Holder        = remotetypes.Holder
	SessionInfo   = remotetypes.SessionInfo
	Reach         = remotetypes.Reach
	ObjectProblem = remotetypes.ObjectProblem
	FsckReport    = remotetypes.FsckReport
	GCResult      = remotetypes.GCResult
)

const (
	MinLeaseTTL     = remotetypes.MinLeaseTTL
	DefaultLeaseTTL = remotetypes.DefaultLeaseTTL
)

var (
	ErrConflict      = remotetypes.ErrConflict
	ErrNoSnapshot    = remotetypes.ErrNoSnapshot
	ErrNoBucket      = remotetypes.ErrNoBucket
	ErrNotS3         = remotetypes.ErrNotS3
	ErrNoCredentials = remotetypes.ErrNoCredentials
	ErrStalled       = remotetypes.ErrStalled
	ErrNoRemote      = remotetypes.ErrNoRemote
	ErrRemoteExists  = remotetypes.ErrRemoteExists
	ErrWrongKey      = remotetypes.ErrWrongKey
	ErrKeySource     = remotetypes.ErrKeySource
	ErrEncrypted     = remotetypes.ErrEncrypted
	ErrNotEncrypted  = remotetypes.ErrNotEncrypted
	ErrLeased        = remotetypes.ErrLeased
	ErrNoLease       = remotetypes.ErrNoLease
)

// ParseURL splits s3://BUCKET/PREFIX into bucket and prefix (without
// slashes at either end).
func ParseURL(s string) (bucket, prefix string, err error) { return remotetypes.ParseURL(s) }
