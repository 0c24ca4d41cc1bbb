package manifest

import (
	"strconv"
	"strings"

	"github.com/homefs/homefs/cas"
)

// Limits on tree nodes and their entries.
const (
	// MaxNodeSize bounds an encoded tree or index node (= cas.MaxChunkSize).
	MaxNodeSize = cas.MaxChunkSize
	// MaxTreeEntries bounds the entries of one tree node.
	MaxTreeEntries = 1 << 20
	// MaxXattrNameLen and MaxXattrValueLen are Linux's XATTR_NAME_MAX and
	// XATTR_SIZE_MAX.
	MaxXattrNameLen  = 255
	MaxXattrValueLen = 64 << 10
	// MaxInlineChunks is the most chunk refs an entry holds inline; larger
	// files use an index node.
	MaxInlineChunks = 16
	// IndexFanout is the most refs in one index node.
	IndexFanout = 1024
	// MaxIndexDepth is the deepest index: IndexFanout^5 chunks cover any
	// int64 size.
	MaxIndexDepth = 5
	// MaxFileSize is the most a homefs file holds. The encoding holds any
	// int64 size, but a live file keeps its chunk list in memory (32 bytes
	// per 64 KiB chunk, holes included), so that a write or truncate far
	// past the end cannot make the daemon allocate without bound: 64 GiB
	// is 32 MiB of refs, and far beyond what an agent home holds. Import
	// refuses a bigger file, which could be stored but not written to.
	MaxFileSize = 64 << 30
)

// ChunkCount returns the number of chunks of a file of size bytes (0 for
// size <= 0).
func ChunkCount(size int64) int {
	if size <= 0 {
		return 0
	}
	n := size / ChunkSize
	if size%ChunkSize != 0 {
		n++
	}
	return int(n)
}

// ChunkLen returns the length of chunk i of a file of size bytes: the
// chunk-length rule. Every chunk but the last holds exactly ChunkSize
// bytes and the last exactly the file's remaining bytes, so that a stored
// chunk's length never depends on anything but the entry that names it,
// and equal content always has equal refs. It is 0 past the end.
func ChunkLen(size int64, i int) int {
	if i < 0 || i >= ChunkCount(size) {
		return 0
	}
	return int(min(size-int64(i)*ChunkSize, ChunkSize))
}

// CheckChunk checks a stored chunk of n plain bytes named as chunk i of a
// file of size bytes against the chunk-length rule (ChunkLen). A hole (the
// zero ref) has no stored bytes and is never checked. A chunk's length is
// fixed by its ref, so a verdict holds for that ref at that (size, i)
// only: the same chunk may be right in one file and wrong in another.
func CheckChunk(size int64, i, n int) error {
	if want := ChunkLen(size, i); n != want {
		return errf(ErrInvalid, "chunk %d: %d bytes, want %d", i, n, want)
	}
	return nil
}

// indexDepth returns the smallest index depth holding n chunks, or 0 when
// n fits inline.
func indexDepth(n int) uint8 {
	if n <= MaxInlineChunks {
		return 0
	}
	d, capacity := uint8(1), IndexFanout
	for n > capacity {
		d++
		capacity *= IndexFanout
	}
	return d
}

// Validate checks every rule of a tree node: entries sorted strictly by
// name bytes (so names are unique), and each entry valid.
func (t *Tree) Validate() error {
	if len(t.Entries) > MaxTreeEntries {
		return errf(ErrTooLarge, "tree: %d entries, over %d", len(t.Entries), MaxTreeEntries)
	}
	for i := range t.Entries {
		e := &t.Entries[i]
		if err := e.Validate(); err != nil {
			return err
		}
		if i > 0 {
			if prev := t.Entries[i-1].Name; prev == e.Name {
				return errf(ErrInvalid, "entry %q: duplicate name", e.Name)
			} else if prev > e.Name {
				return errf(ErrInvalid, "entry %q: not sorted (after %q)", e.Name, prev)
			}
		}
	}
	if t.Self != nil {
		return t.Self.Validate()
	}
	return nil
}

// Validate checks the rules of one entry, independently of its siblings.
func (e *Entry) Validate() error {
	if err := ValidateName(e.Name); err != nil {
		return wrapf(err, "entry")
	}
	bad := func(format string, args ...any) error {
		return errf(ErrInvalid, "entry %q: "+format, append([]any{e.Name}, args...)...)
	}
	if err := e.validateFields(bad); err != nil {
		return err
	}
	if err := e.validateKind(bad); err != nil {
		return err
	}
	return validateXattrs(e.Xattrs, bad)
}

// validateFields checks that the entry sets only the fields its kind has.
func (e *Entry) validateFields(bad func(format string, args ...any) error) error {
	switch {
	case e.Mode&^0o7777 != 0:
		return bad("mode %#o has bits outside 07777", e.Mode)
	case (e.LinkID != 0) != (e.Nlink >= 1):
		return bad("link id %d with nlink %d: want both set or both zero", e.LinkID, e.Nlink)
	case e.Kind != KindDir && !e.Tree.IsZero():
		return bad("%v with a tree ref", e.Kind)
	case e.Kind != KindSymlink && e.Target != "":
		return bad("%v with a symlink target", e.Kind)
	case e.Kind != KindFile && (len(e.Chunks) != 0 || !e.Index.IsZero() || e.Depth != 0):
		return bad("%v with file content", e.Kind)
	case !e.Kind.IsDevice() && e.Rdev != 0:
		return bad("%v with a device number", e.Kind)
	}
	return nil
}

// validateKind checks the rules of the entry's own kind.
func (e *Entry) validateKind(bad func(format string, args ...any) error) error {
	switch e.Kind {
	case KindFile:
		if err := validateContent(e.Size, e.Chunks, e.Index, e.Depth); err != nil {
			return wrapf(err, "entry %q", e.Name)
		}
		return nil
	case KindDir:
		return e.validateDir(bad)
	case KindSymlink:
		return e.validateSymlink(bad)
	case KindFifo, KindSocket, KindCharDev, KindBlockDev:
		if e.Size != 0 {
			return bad("%v with size %d", e.Kind, e.Size)
		}
		return nil
	default:
		return bad("unknown kind %d", e.Kind)
	}
}

func (e *Entry) validateDir(bad func(format string, args ...any) error) error {
	switch {
	case e.Tree.IsZero():
		return bad("directory without a tree ref")
	case e.Size != 0:
		return bad("directory with size %d", e.Size)
	case e.LinkID != 0:
		return bad("directory with a link id")
	}
	return nil
}

func (e *Entry) validateSymlink(bad func(format string, args ...any) error) error {
	switch {
	case e.Target == "":
		return bad("symlink with an empty target")
	case len(e.Target) > MaxPathLen:
		return bad("symlink target of %d bytes, over %d", len(e.Target), MaxPathLen)
	case strings.IndexByte(e.Target, 0) >= 0:
		return bad("symlink target contains NUL")
	case e.Size != int64(len(e.Target)):
		return bad("symlink size %d, target has %d bytes", e.Size, len(e.Target))
	}
	return nil
}

// validateXattrs checks names, values and order; bad words the error.
func validateXattrs(xs []Xattr, bad func(format string, args ...any) error) error {
	for i, x := range xs {
		switch {
		case x.Name == "" || len(x.Name) > MaxXattrNameLen:
			return bad("xattr %d: name of %d bytes, want 1 to %d", i, len(x.Name), MaxXattrNameLen)
		case strings.IndexByte(x.Name, 0) >= 0:
			return bad("xattr %q: name contains NUL", x.Name)
		case len(x.Value) > MaxXattrValueLen:
			return bad("xattr %q: value of %d bytes, over %d", x.Name, len(x.Value), MaxXattrValueLen)
		case i > 0 && xs[i-1].Name >= x.Name:
			return bad("xattr %q: not sorted or duplicate (after %q)", x.Name, xs[i-1].Name)
		}
	}
	return nil
}

// Validate checks a directory's own attributes.
func (a *DirAttr) Validate() error {
	bad := func(format string, args ...any) error {
		return errf(ErrInvalid, "tree: own attributes: "+format, args...)
	}
	if a.Mode&^0o7777 != 0 {
		return bad("mode %#o has bits outside 07777", a.Mode)
	}
	return validateXattrs(a.Xattrs, bad)
}

// validateContent checks a file's size against its chunk list or index.
// The index depth must be the smallest that holds the chunks, so every
// content has one encoding.
func validateContent(size int64, chunks []cas.Ref, index cas.Ref, depth uint8) error {
	if size < 0 {
		return errf(ErrInvalid, "negative size %d", size)
	}
	n := ChunkCount(size)
	if depth == 0 {
		if !index.IsZero() {
			return errf(ErrInvalid, "index ref with depth 0")
		}
		if n > MaxInlineChunks {
			return errf(ErrInvalid, "size %d needs %d chunks, over %d inline: want an index", size, n, MaxInlineChunks)
		}
		if len(chunks) != n {
			return errf(ErrInvalid, "size %d needs %d chunks, have %d", size, n, len(chunks))
		}
		return nil
	}
	if len(chunks) != 0 {
		return errf(ErrInvalid, "both inline chunks and an index")
	}
	if index.IsZero() {
		return errf(ErrInvalid, "index depth %d with a zero index ref", depth)
	}
	if depth > MaxIndexDepth {
		return errf(ErrInvalid, "index depth %d, over %d", depth, MaxIndexDepth)
	}
	if want := indexDepth(n); depth != want {
		return errf(ErrInvalid, "size %d (%d chunks) wants index depth %d, have %d", size, n, want, depth)
	}
	return nil
}

// String returns "file", "dir", "symlink", "fifo", "socket", "char",
// "block" or "kind(N)".
func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "dir"
	case KindSymlink:
		return "symlink"
	case KindFifo:
		return "fifo"
	case KindSocket:
		return "socket"
	case KindCharDev:
		return "char"
	case KindBlockDev:
		return "block"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}
