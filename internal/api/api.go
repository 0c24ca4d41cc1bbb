package api

import (
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/remote/remotetypes"
	"github.com/homefs/homefs/manifest"
)

// Status describes a running daemon.
type Status struct {
	Version       string    `json:"version"`
	PID           int       `json:"pid"`
	UID           int       `json:"uid"`
	Root          string    `json:"root"`
	Socket        string    `json:"socket"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	// Transport is how mounts reach the kernel, and what the daemon did
	// to the host's FUSE over io_uring switch.
	Transport TransportStatus `json:"transport"`
	Store     StoreStatus     `json:"store"`
	Mounts    []MountStatus   `json:"mounts"`
	Remotes   []RemoteStatus  `json:"remotes"`
}

// TransportStatus is the daemon's FUSE over io_uring mode and the host's
// switch (/sys/module/fuse/parameters/enable_uring).
type TransportStatus struct {
	// Mode is serve --fuse-uring: auto, on or off.
	Mode string `json:"mode"`
	// Switch is the switch's value now: "Y", "N", or "" for a kernel
	// without FUSE over io_uring.
	Switch string `json:"switch"`
	// SwitchChanged is set while the daemon has turned the switch on; it
	// turns it off again at a clean exit.
	SwitchChanged bool `json:"switch_changed"`
}

// StoreStatus is the store directory, what it takes on disk and what its
// filesystem has left.
type StoreStatus struct {
	Dir string `json:"dir"`
	// Bytes is the disk space of the store's files (allocated blocks).
	Bytes int64 `json:"bytes"`
	// FreeBytes is what the filesystem lets the daemon still write;
	// TotalBytes is its size.
	FreeBytes  int64 `json:"free_bytes"`
	TotalBytes int64 `json:"total_bytes"`
}

// MountStatus is one mount and what its session holds that is not yet
// durable (per session: two mounts of a session show the same figures).
// Read-only mounts have nothing unflushed.
type MountStatus struct {
	MountInfo
	// DirtyBytes is what a flush would store now: write buffers plus
	// staged file content written since the daemon last read it
	// (fusefs.SessionState).
	DirtyBytes int64 `json:"dirty_bytes"`
	// JournalBytes is what fsyncs made durable in the session's journal
	// since the last flush: those writes count in DirtyBytes until the
	// next flush stores them.
	JournalBytes int64 `json:"journal_bytes"`
	// DirtyEntries counts files and directories changed since the last
	// flush.
	DirtyEntries int `json:"dirty_entries"`
	// LastFlush is when the session head last durably took every change.
	LastFlush time.Time `json:"last_flush,omitzero"`
}

// Remote reachability, as status reports it.
const (
	RemoteReachable   = "reachable"
	RemoteUnreachable = "unreachable"
	RemoteNotChecked  = "not checked"
)

// RemoteStatus is one configured remote and whether it answered.
type RemoteStatus struct {
	Name     string `json:"name"`
	URL      string `json:"url"`
	Endpoint string `json:"endpoint,omitempty"`
	// State is RemoteReachable, RemoteUnreachable or RemoteNotChecked.
	State string `json:"state"`
	// Error says why a remote is unreachable.
	Error string `json:"error,omitempty"`
	// LatencyMS is how long the check took, in milliseconds.
	LatencyMS int64 `json:"latency_ms,omitempty"`
}

// SessionInfo is one session as listed.
type SessionInfo struct {
	Name     string            `json:"name"`
	Root     cas.Ref           `json:"root"`
	Snapshot string            `json:"snapshot,omitempty"` // last captured or restored
	Origin   *manifest.Lineage `json:"origin,omitempty"`
	Created  time.Time         `json:"created"`
	Updated  time.Time         `json:"updated"`
	Mounts   []string          `json:"mounts,omitempty"`
	Layout   *manifest.Layout  `json:"layout,omitempty"`
	// DroppedDerived lists the providers' derived state (such as Codex's
	// state_5.sqlite, which records absolute paths) removed from a session
	// made from another one's tree, so the harness rebuilds it there.
	DroppedDerived []string `json:"dropped_derived,omitempty"`
	// Warnings name provider state that records absolute paths and that
	// homefs left as it is: valid only where the session is shown at its
	// canonical paths (homefs run).
	Warnings []string `json:"warnings,omitempty"`
}

// Owner is a uid and a gid.
type Owner struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// CreateSessionRequest creates a session, empty or from a snapshot.
type CreateSessionRequest struct {
	Name string `json:"name"`
	From string `json:"from,omitempty"`
	// Owner owns the session's root directory (so that an agent user can
	// create its home there).
	Owner *Owner `json:"owner,omitempty"`
	// Layout, when set, is the session's layout (else a snapshot's).
	Layout *manifest.Layout `json:"layout,omitempty"`
}

// SetLayoutRequest replaces a session's layout (nil clears it).
type SetLayoutRequest struct {
	Layout *manifest.Layout `json:"layout,omitempty"`
}

// MountRequest mounts SESSION[/SUBTREE] (or one of its snapshots) at Dir.
type MountRequest struct {
	Session  string `json:"session"`
	Subtree  string `json:"subtree,omitempty"`
	Dir      string `json:"dir"`
	ReadOnly bool   `json:"read_only,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
	// Private makes a mount only the daemon's user may enter; otherwise
	// every user may, with the kernel checking modes and owners.
	Private bool `json:"private,omitempty"`
	// Dev lets device nodes on the mount open their devices (a daemon
	// running as root only); mounts are nodev otherwise.
	Dev bool `json:"dev,omitempty"`
	// NoAtime makes reads set no access time (mount -o noatime);
	// otherwise they set it as relatime does.
	NoAtime bool `json:"noatime,omitempty"`
	// Owner, when set, owns the mount's root directory.
	Owner *Owner `json:"owner,omitempty"`
	// Remote, when set, pulls the snapshot (Snapshot, else Session: an id
	// or a session's remote head) from that remote first, tree only, and
	// mounts it read-only; file chunks come on first read.
	Remote string `json:"remote,omitempty"`
	// Lease, when set, takes the session's lease on that remote before
	// mounting; the last unmount of the session that holds it releases it.
	Lease string `json:"lease,omitempty"`
}

// MountInfo is one mount the daemon serves (and records in mounts.json).
type MountInfo struct {
	Dir      string    `json:"dir"`
	Session  string    `json:"session"`
	Subtree  string    `json:"subtree,omitempty"`
	Snapshot string    `json:"snapshot,omitempty"`
	ReadOnly bool      `json:"read_only,omitempty"`
	Private  bool      `json:"private,omitempty"`
	Dev      bool      `json:"dev,omitempty"`
	NoAtime  bool      `json:"noatime,omitempty"`
	Remote   string    `json:"remote,omitempty"`
	Lease    string    `json:"lease,omitempty"` // the remote whose lease the mount holds
	Since    time.Time `json:"since"`
	// Transport is how the kernel's requests reach the mount: "io_uring"
	// or "/dev/fuse".
	Transport string `json:"transport,omitempty"`
}

// UnmountRequest detaches the mount at Dir.
type UnmountRequest struct {
	Dir string `json:"dir"`
}

// CaptureRequest captures a session.
type CaptureRequest struct {
	Message string                     `json:"message,omitempty"`
	Handles map[string]manifest.Handle `json:"handles,omitempty"`
}

// SnapshotInfo describes one snapshot.
type SnapshotInfo struct {
	ID        string                     `json:"id"`
	Session   string                     `json:"session"`
	Parent    string                     `json:"parent,omitempty"`
	Origin    *manifest.Lineage          `json:"origin,omitempty"`
	Created   time.Time                  `json:"created"`
	Message   string                     `json:"message,omitempty"`
	Handles   map[string]manifest.Handle `json:"handles,omitempty"`
	Root      cas.Ref                    `json:"root"`
	ForkPoint bool                       `json:"fork_point,omitempty"` // older entries belong to the origin's history
	// Forgotten marks a gap in a log: ID names a snapshot that was
	// forgotten (only ID, Session and ForkPoint are set).
	Forgotten bool `json:"forgotten,omitempty"`
}

// ForgetRequest forgets snapshots: the ones named (Snapshots: ids,
// prefixes, SESSION@ID), or those of Session that Policy does not keep.
type ForgetRequest struct {
	Snapshots []string       `json:"snapshots,omitempty"`
	Session   string         `json:"session,omitempty"`
	Policy    catalog.Policy `json:"policy,omitempty"`
	DryRun    bool           `json:"dry_run,omitempty"`
}

// ForgetResult says what a forget removed (or would, in a dry run) and,
// for a policy, why each kept snapshot stays.
type ForgetResult struct {
	DryRun    bool               `json:"dry_run,omitempty"`
	Policy    string             `json:"policy,omitempty"`
	Forgotten []string           `json:"forgotten"`
	Decisions []catalog.Decision `json:"decisions,omitempty"`
}

// RemoveSessionResult is what session rm removed.
type RemoveSessionResult struct {
	// Forgotten lists the snapshots a purge forgot.
	Forgotten []string `json:"forgotten,omitempty"`
}

// ForkRequest forks SOURCE[@SNAPSHOT] into Target.
type ForkRequest struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// RestoreRequest points a session at a snapshot.
type RestoreRequest struct {
	Snapshot string `json:"snapshot"`
}

// Change kinds of a DiffEntry.
const (
	Added   = "added"
	Removed = "removed"
	Changed = "changed"
)

// DiffEntry is one path that differs.
type DiffEntry struct {
	Path    string `json:"path"`
	Change  string `json:"change"`
	Kind    string `json:"kind"`
	OldSize int64  `json:"old_size"`
	NewSize int64  `json:"new_size"`
}

// DiffResult compares two trees.
type DiffResult struct {
	A       string      `json:"a"`
	B       string      `json:"b"`
	Entries []DiffEntry `json:"entries"`
}

// ImportResult is what an import created.
type ImportResult struct {
	Session  string  `json:"session"`
	Root     cas.Ref `json:"root"`
	Files    int64   `json:"files"`
	Dirs     int64   `json:"dirs"`
	Symlinks int64   `json:"symlinks"`
	Special  int64   `json:"special,omitempty"` // fifos and device nodes
	Bytes    int64   `json:"bytes"`
}

// Progress is one progress line of a streamed operation.
type Progress struct {
	Phase string `json:"phase"`
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
	// BytesTotal is the bytes known so far to be transferred (push, pull).
	BytesTotal int64 `json:"bytes_total,omitempty"`
}

// BindRequest binds provider session ID of Provider from session Source
// into session Target (see fork.Bind).
type BindRequest struct {
	Provider string `json:"provider"`
	ID       string `json:"id"`
	Source   string `json:"source"`
	Target   string `json:"target"`
}

// BindResult is what a bind did: the rollouts of the chain, ancestors
// first, each with its action, the target's new handle and the derived
// state removed.
type BindResult struct {
	Source string `json:"source"`
	Target string `json:"target"`
	fork.BindResult
}

// ImportNativeRequest creates Session from a native snapshot: the JSON in
// File, blobs under BlobDir/blobs/. Both paths are absolute.
type ImportNativeRequest struct {
	File    string `json:"file"`
	BlobDir string `json:"blob_dir"`
	Session string `json:"session"`
}

// ImportNativeResult is what a native import created.
type ImportNativeResult struct {
	Session string                     `json:"session"`
	Root    cas.Ref                    `json:"root"`
	Files   int                        `json:"files"`
	Handles map[string]manifest.Handle `json:"handles,omitempty"`
}

// ExportNativeRequest writes Snapshot in the native format into Dir (an
// absolute path; missing or empty).
type ExportNativeRequest struct {
	Snapshot string `json:"snapshot"`
	Dir      string `json:"dir"`
}

// ExportNativeResult says what a native export wrote and left out.
type ExportNativeResult struct {
	Snapshot string   `json:"snapshot"`
	Dir      string   `json:"dir"`
	Manifest string   `json:"manifest"` // Dir/snapshot.json
	LeftOut  []string `json:"left_out"`
}

// PushRequest pushes a session's latest snapshot, or a snapshot, to a
// remote ("" for the only one).
type PushRequest struct {
	Spec   string `json:"spec"`
	Remote string `json:"remote,omitempty"`
	// Repair reads back what the push would skip because the remote has
	// it, and uploads again what is missing or damaged there.
	Repair bool `json:"repair,omitempty"`
}

// PushResult is what a push did.
type PushResult struct {
	Remote        string `json:"remote"`
	Snapshot      string `json:"snapshot"`
	Session       string `json:"session"`
	Records       int    `json:"records"` // snapshot records uploaded
	Checked       int    `json:"checked"` // objects asked about
	Uploaded      int    `json:"uploaded"`
	UploadedBytes int64  `json:"uploaded_bytes"` // stored (compressed) size
	HeadMoved     bool   `json:"head_moved"`
	// With Repair: objects read back intact, and those found missing or
	// damaged (all uploaded again, counted in Uploaded).
	Repair   bool `json:"repair,omitempty"`
	Verified int  `json:"verified,omitempty"`
	Missing  int  `json:"missing,omitempty"`
	Damaged  int  `json:"damaged,omitempty"`
}

// PullRequest brings a snapshot (an id, a prefix, or a session's remote
// head) from a remote; All fetches every file chunk too.
type PullRequest struct {
	Spec   string `json:"spec"`
	Remote string `json:"remote,omitempty"`
	All    bool   `json:"all,omitempty"`
}

// PullResult is what a pull did.
type PullResult struct {
	Remote       string `json:"remote"`
	Snapshot     string `json:"snapshot"`
	Session      string `json:"session"`
	Records      int    `json:"records"` // snapshots registered locally
	Nodes        int    `json:"nodes"`
	Fetched      int    `json:"fetched"`
	FetchedBytes int64  `json:"fetched_bytes"`
	All          bool   `json:"all"`
}

// RunMountInfo is the mount a run binds from.
type RunMountInfo struct {
	Dir    string           `json:"dir"`
	Layout *manifest.Layout `json:"layout,omitempty"`
}

// GCResult is what gc freed: the engine's sweep (fusefs.GCResult) and
// the compaction that followed it.
type GCResult struct {
	Scanned     int64         `json:"scanned"`      // chunks in the store before the sweep
	Reachable   int64         `json:"reachable"`    // chunks marked
	Freed       int64         `json:"freed"`        // chunks deleted
	FreedBytes  int64         `json:"freed_bytes"`  // their plain bytes
	FreedStored int64         `json:"freed_stored"` // their stored bytes
	Duration    time.Duration `json:"duration_ns"`
	// ValueLogFiles is how many of the store's log files were rewritten to
	// give the freed space back to the disk.
	ValueLogFiles int `json:"value_log_files"`
	// StoreBytesBefore and StoreBytesAfter are the disk space of the
	// store's files around the compaction (zero when none ran).
	StoreBytesBefore int64 `json:"store_bytes_before,omitempty"`
	StoreBytesAfter  int64 `json:"store_bytes_after,omitempty"`
}

// StatusOptions say what Status checks beyond the daemon itself.
type StatusOptions struct {
	// CheckRemotes pings every configured remote (at most 3 s each, all
	// at once); otherwise they are "not checked".
	CheckRemotes bool
}

// LeaseRequest acquires or releases the lease of a session on a remote
// ("" for the only one).
type LeaseRequest struct {
	Session string `json:"session"`
	Remote  string `json:"remote,omitempty"`
	TTLMs   int64  `json:"ttl_ms,omitempty"` // acquire: 0 for remotetypes.DefaultLeaseTTL
	Steal   bool   `json:"steal,omitempty"`  // acquire: even from a live holder
}

// LeaseInfo is a session's lease on a remote.
type LeaseInfo struct {
	Remote   string             `json:"remote"`
	Session  string             `json:"session"`
	Holder   remotetypes.Holder `json:"holder"`
	Acquired time.Time          `json:"acquired"`
	Renewed  time.Time          `json:"renewed"`
	Expires  time.Time          `json:"expires"`
	TTLMs    int64              `json:"ttl_ms"`
	Released bool               `json:"released"`
	// Live: not released nor expired, by this daemon's clock.
	Live bool `json:"live"`
	// Ours: this daemon is the holder. Kept: it renews the lease.
	Ours bool `json:"ours"`
	Kept bool `json:"kept"`
}

// RemoteFsckRequest checks a remote ("" for the only one): every head, or
// only Session's.
type RemoteFsckRequest struct {
	Remote  string `json:"remote,omitempty"`
	Session string `json:"session,omitempty"`
}

// RemoteRequest names a remote ("" for the only one).
type RemoteRequest struct {
	Remote string `json:"remote,omitempty"`
}

// RemoteSessions is a remote's sessions.
type RemoteSessions struct {
	Remote   string                    `json:"remote"`
	Sessions []remotetypes.SessionInfo `json:"sessions"`
}

// RemoteForgetRequest forgets snapshots on a remote, as ForgetRequest does
// locally (the same rules); Remote names it.
type RemoteForgetRequest struct {
	ForgetRequest
	Remote string `json:"remote,omitempty"`
}

// RemotePurgeRequest removes a session's head and records from a remote.
type RemotePurgeRequest struct {
	Remote  string `json:"remote,omitempty"`
	Session string `json:"session"`
}
