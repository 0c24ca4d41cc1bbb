package api

import "path/filepath"

// DefaultRoot is where the daemon keeps its state when neither --root nor
// HOMEFS_ROOT says otherwise.
const DefaultRoot = "/var/lib/homefs"

// SocketName is the socket's name inside the root, unless configured.
const SocketName = "homefs.sock"

// DefaultSocket returns the socket path for a root.
func DefaultSocket(root string) string { return filepath.Join(root, SocketName) }

// Endpoints, all under /v1/.
const (
	PathStatus       = "/v1/status"
	PathSessions     = "/v1/sessions"
	PathMounts       = "/v1/mounts"
	PathUnmount      = "/v1/unmount"
	PathFork         = "/v1/fork"
	PathDiff         = "/v1/diff"
	PathExport       = "/v1/export"
	PathImport       = "/v1/import"
	PathGC           = "/v1/gc"
	PathForget       = "/v1/forget"
	PathFsck         = "/v1/fsck"
	PathStats        = "/v1/stats"
	PathBind         = "/v1/bind"
	PathImportNative = "/v1/import-native"
	PathExportNative = "/v1/export-native"
	PathRemotes      = "/v1/remotes"
	PathPush         = "/v1/push"
	PathPull         = "/v1/pull"

	// Leases: read, acquire, release.
	PathLeases       = "/v1/leases"
	PathLeaseAcquire = "/v1/leases/acquire"
	PathLeaseRelease = "/v1/leases/release"

	// A remote's lifecycle: listing its sessions, forgetting and purging
	// there, its gc, and reading back what its heads reach (fsck).
	PathRemoteSessions = "/v1/remote/sessions"
	PathRemoteForget   = "/v1/remote/forget"
	PathRemotePurge    = "/v1/remote/purge"
	PathRemoteGC       = "/v1/remote/gc"
	PathRemoteFsck     = "/v1/remote/fsck"
)

// ErrorTrailer is the trailer that carries an error met after a stream
// (export's tar) began.
const ErrorTrailer = "Homefs-Error"
