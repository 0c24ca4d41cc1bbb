package manifest

import (
	"github.com/homefs/homefs/cas"
)

// FormatVersion is the version of every encoding in this package. Decoders
// reject other versions.
const FormatVersion = 1

// SnapshotLayoutVersion is the version of a snapshot record that carries a
// layout: a decoder of version 1 alone would refuse the new field, so such
// a record says it is of a later format rather than looking damaged.
// Records without a layout stay version 1 (and keep their ids).
const SnapshotLayoutVersion = 2

// SpecialTreeVersion is the version of a tree node that holds a fifo, a
// socket or a device node: a decoder of version 1 alone would call those
// kinds invalid, so such a node says it is of a later format rather than
// looking damaged. Tree nodes without them stay version 1 (and keep their
// refs).
const SpecialTreeVersion = 2

// AtimeTreeVersion is the version of a tree node that records an access
// time (Entry.AtimeNs, DirAttr.AtimeNs); it may hold special files too.
// Tree nodes that record none stay version 1 or 2 (and keep their refs).
const AtimeTreeVersion = 3

// BtimeTreeVersion is the version of a tree node that records a birth
// time (Entry.BtimeNs, DirAttr.BtimeNs); it holds an access time field
// too (0 where none is recorded) and may hold special files. Tree nodes
// that record none stay version 1 to 3 (and keep their refs).
const BtimeTreeVersion = 4

// ChunkSize is the fixed size of file chunks: chunk i of a file covers
// bytes [i*ChunkSize, min((i+1)*ChunkSize, size)), and a stored chunk holds
// exactly those bytes (ChunkLen, CheckChunk). See docs/ARCHITECTURE.md for
// why fixed-size chunks.
const ChunkSize = 64 << 10

// MaxNameLen is the longest entry name, as on ext4.
const MaxNameLen = 255

// Kind is what an entry is.
type Kind uint8

const (
	KindFile    Kind = 1
	KindDir     Kind = 2
	KindSymlink Kind = 3
	// The special files: no content, only attributes (and a device
	// number for device nodes).
	KindFifo     Kind = 4
	KindSocket   Kind = 5
	KindCharDev  Kind = 6
	KindBlockDev Kind = 7
)

// IsSpecial reports whether k is a fifo, a socket or a device node.
func (k Kind) IsSpecial() bool { return k >= KindFifo && k <= KindBlockDev }

// IsDevice reports whether k is a character or block device node.
func (k Kind) IsDevice() bool { return k == KindCharDev || k == KindBlockDev }

// Xattr is one extended attribute.
type Xattr struct {
	Name  string
	Value []byte
}

// Entry is one name in a directory.
type Entry struct {
	Name    string
	Kind    Kind
	Mode    uint32 // permission bits with setuid, setgid and sticky (07777)
	UID     uint32
	GID     uint32
	Size    int64 // file: bytes; symlink: len(Target); others: 0
	MtimeNs int64 // modification time, nanoseconds since the Unix epoch
	CtimeNs int64 // status change time, nanoseconds since the Unix epoch
	// AtimeNs is the access time, nanoseconds since the Unix epoch; 0 when
	// none is recorded, which reads as MtimeNs (Atime), so an access time
	// of exactly the epoch is not kept.
	AtimeNs int64
	// BtimeNs is the birth (creation) time, nanoseconds since the Unix
	// epoch; 0 when unknown (a tree from before birth times were kept).
	BtimeNs int64

	// File content: Chunks inline (at most MaxInlineChunks), or Index
	// pointing at an index node of the given Depth (>= 1). A stored chunk
	// holds exactly ChunkLen(Size, i) bytes; a zero chunk ref is a hole,
	// that many zero bytes.
	Chunks []cas.Ref
	Index  cas.Ref
	Depth  uint8

	// Dir: the ref of its tree node (never zero; the empty tree has a ref).
	Tree cas.Ref

	// Symlink: the stored target, never followed.
	Target string

	// Device nodes: the device number in Linux's 32-bit encoding
	// (new_encode_dev, what FUSE carries and what stat's st_rdev is for
	// majors below 4096 and minors below 2^20). Zero for every other kind.
	Rdev uint32

	// Xattrs sorted by name, unique.
	Xattrs []Xattr

	// LinkID, when non-zero, identifies a hard-linked non-directory
	// inside one snapshot: entries with the same LinkID are one inode with
	// Nlink names.
	LinkID uint64
	Nlink  uint32
}

// Tree is the content of one directory: entries sorted by name (bytewise),
// names unique.
type Tree struct {
	Entries []Entry
	// Self, when set, holds the directory's own attributes, which no
	// entry holds for it: a session's root (its mode and owner matter to
	// whoever mounts it).
	Self *DirAttr
}

// DirAttr is a directory's own attributes, as an entry would hold them.
type DirAttr struct {
	Mode             uint32 // permission bits and setuid/setgid/sticky (07777)
	UID, GID         uint32
	MtimeNs, CtimeNs int64
	AtimeNs          int64   // as Entry.AtimeNs
	BtimeNs          int64   // as Entry.BtimeNs
	Xattrs           []Xattr // sorted by name, unique
}

// Atime is e's access time: AtimeNs, or MtimeNs when none is recorded.
func (e *Entry) Atime() int64 { return atime(e.AtimeNs, e.MtimeNs) }

// Atime is a's access time: AtimeNs, or MtimeNs when none is recorded.
func (a *DirAttr) Atime() int64 { return atime(a.AtimeNs, a.MtimeNs) }

func atime(a, m int64) int64 {
	if a == 0 {
		return m
	}
	return a
}

// Handle is a provider session id and the turn it is valid through.
type Handle struct {
	ID      string `json:"id"`
	Through string `json:"through,omitempty"`
}

// Lineage records where a forked session came from.
type Lineage struct {
	Session  string `json:"session"`
	Snapshot string `json:"snapshot,omitempty"`
}

// Snapshot is an immutable record of a session's state at one point in
// time. It is stored as a CAS object; its ID is that object's ref hex.
type Snapshot struct {
	Version   int               `json:"version"`
	Session   string            `json:"session"`
	Parent    string            `json:"parent,omitempty"` // previous snapshot of the same session
	Origin    *Lineage          `json:"origin,omitempty"` // set on the first snapshot after a fork
	CreatedNs int64             `json:"created_ns"`
	Message   string            `json:"message,omitempty"`
	Handles   map[string]Handle `json:"handles,omitempty"`
	// Layout is the session's layout when it was captured (see Layout).
	Layout *Layout `json:"layout,omitempty"`
	Root   cas.Ref `json:"root"`
}
