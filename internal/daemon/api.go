package daemon

import (
	"time"

	"homefs/cas"
	"homefs/manifest"
)

// Status describes a running daemon.
type Status struct {
	PID     int       `json:"pid"`
	UID     int       `json:"uid"`
	Root    string    `json:"root"`
	Socket  string    `json:"socket"`
	Started time.Time `json:"started"`
	Mounts  int       `json:"mounts"`
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
}

// CreateSessionRequest creates a session, empty or from a snapshot.
type CreateSessionRequest struct {
	Name string `json:"name"`
	From string `json:"from,omitempty"`
}

// MountRequest mounts SESSION[/SUBTREE] (or one of its snapshots) at Dir.
type MountRequest struct {
	Session  string `json:"session"`
	Subtree  string `json:"subtree,omitempty"`
	Dir      string `json:"dir"`
	ReadOnly bool   `json:"read_only,omitempty"`
	Snapshot string `json:"snapshot,omitempty"`
}

// MountInfo is one mount the daemon serves (and records in mounts.json).
type MountInfo struct {
	Dir      string    `json:"dir"`
	Session  string    `json:"session"`
	Subtree  string    `json:"subtree,omitempty"`
	Snapshot string    `json:"snapshot,omitempty"`
	ReadOnly bool      `json:"read_only,omitempty"`
	Since    time.Time `json:"since"`
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
	Bytes    int64   `json:"bytes"`
}

// Progress is one progress line of a streamed operation.
type Progress struct {
	Phase string `json:"phase"`
	Done  int64  `json:"done"`
	Total int64  `json:"total,omitempty"`
	Bytes int64  `json:"bytes,omitempty"`
}

// streamLine is one line of a streamed response.
type streamLine struct {
	Progress *Progress `json:"progress,omitempty"`
	Result   any       `json:"result,omitempty"`
	Error    *Error    `json:"error,omitempty"`
}
