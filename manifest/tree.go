package manifest

import (
	"encoding/binary"
	"math"
	"math/bits"

	"github.com/homefs/homefs/cas"
)

// Every node starts with a 4-byte magic naming its type, then one byte of
// FormatVersion (for a tree: SpecialTreeVersion if it holds special files,
// AtimeTreeVersion if it records an access time, BtimeTreeVersion if it
// records a birth time).
const (
	treeMagic  = "HFST"
	indexMagic = "HFSI"
	headerLen  = len(treeMagic) + 1
)

// minEntryLen is the fewest bytes one encoded entry takes (a fifo with a
// one-byte name: no body); it bounds allocations made before the bytes are
// read.
const minEntryLen = 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1 + 1

// EncodeTree returns the canonical encoding of t, after validating it.
//
// Layout (uvarint and zig-zag varint as in encoding/binary, always
// minimal; refs are 32 raw bytes):
//
//	"HFST" version:byte count:uvarint entry* [self]
//	       (version is 4 if an entry or self has a btime, else 3 if one
//	       has an atime, else 2 if an entry is a special file, else 1)
//	entry = nameLen:uvarint name kind:byte mode uid gid:uvarint
//	        mtime ctime [atime if version >= 3] [btime if version 4]:varint body xattrCount:uvarint xattr* linkID:uvarint [nlink:uvarint if linkID != 0]
//	self  = 0x01 mode uid gid:uvarint mtime ctime [atime if version >= 3] [btime if version 4]:varint xattrCount:uvarint xattr*   (only if Self is set)
//	body  = file:    size:uvarint depth:byte (ChunkCount(size) refs if depth == 0 | index ref)
//	        dir:     tree ref
//	        symlink: targetLen:uvarint target   (size is len(target))
//	        fifo, socket: nothing               (size is 0)
//	        char, block device: rdev:uvarint    (size is 0)
//	xattr = nameLen:uvarint name valueLen:uvarint value
func EncodeTree(t *Tree) ([]byte, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return encodeTree(t, treeVersion(t))
}

// layout is which optional times a tree version's encoding holds.
type layout struct{ atimes, btimes bool }

func layoutOf(version byte) layout {
	return layout{atimes: version >= AtimeTreeVersion, btimes: version >= BtimeTreeVersion}
}

// timesLen is the length of the optional times l holds.
func (l layout) timesLen(atime, btime int64) int {
	n := 0
	if l.atimes {
		n += varintLen(atime)
	}
	if l.btimes {
		n += varintLen(btime)
	}
	return n
}

// appendTimes appends the optional times l holds.
func (l layout) appendTimes(b []byte, atime, btime int64) []byte {
	if l.atimes {
		b = binary.AppendVarint(b, atime)
	}
	if l.btimes {
		b = binary.AppendVarint(b, btime)
	}
	return b
}

// encodeTree encodes a valid t in the given version's layout.
func encodeTree(t *Tree, version byte) ([]byte, error) {
	l := layoutOf(version)
	size := headerLen + uvarintLen(uint64(len(t.Entries)))
	for i := range t.Entries {
		size += encodedEntryLen(&t.Entries[i], l)
	}
	if a := t.Self; a != nil {
		size += 1 + uvarintLen(uint64(a.Mode)) + uvarintLen(uint64(a.UID)) + uvarintLen(uint64(a.GID)) +
			varintLen(a.MtimeNs) + varintLen(a.CtimeNs) + l.timesLen(a.AtimeNs, a.BtimeNs) + xattrsLen(a.Xattrs)
	}
	if size > MaxNodeSize {
		return nil, errf(ErrTooLarge, "tree: encoding of %d bytes, over %d", size, MaxNodeSize)
	}
	b := make([]byte, 0, size)
	b = append(b, treeMagic...)
	b = append(b, version)
	b = binary.AppendUvarint(b, uint64(len(t.Entries)))
	for i := range t.Entries {
		b = appendEntry(b, &t.Entries[i], l)
	}
	if a := t.Self; a != nil {
		b = append(b, selfMarker)
		b = binary.AppendUvarint(b, uint64(a.Mode))
		b = binary.AppendUvarint(b, uint64(a.UID))
		b = binary.AppendUvarint(b, uint64(a.GID))
		b = binary.AppendVarint(b, a.MtimeNs)
		b = binary.AppendVarint(b, a.CtimeNs)
		b = l.appendTimes(b, a.AtimeNs, a.BtimeNs)
		b = appendXattrs(b, a.Xattrs)
	}
	return b, nil
}

// selfMarker starts a tree's own attributes, after its entries.
const selfMarker = 0x01

// encodedEntryLen is the exact length appendEntry writes for e.
func encodedEntryLen(e *Entry, l layout) int {
	n := strLen(e.Name) + 1 + uvarintLen(uint64(e.Mode)) + uvarintLen(uint64(e.UID)) + uvarintLen(uint64(e.GID)) +
		varintLen(e.MtimeNs) + varintLen(e.CtimeNs) + l.timesLen(e.AtimeNs, e.BtimeNs)
	switch e.Kind {
	case KindFile:
		n += uvarintLen(uint64(e.Size)) + 1
		if e.Depth == 0 {
			n += len(e.Chunks) * len(cas.Ref{})
		} else {
			n += len(cas.Ref{})
		}
	case KindDir:
		n += len(cas.Ref{})
	case KindSymlink:
		n += strLen(e.Target)
	case KindCharDev, KindBlockDev:
		n += uvarintLen(uint64(e.Rdev))
	}
	n += xattrsLen(e.Xattrs)
	n += uvarintLen(e.LinkID)
	if e.LinkID != 0 {
		n += uvarintLen(uint64(e.Nlink))
	}
	return n
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }
func varintLen(v int64) int   { return uvarintLen(uint64(v<<1) ^ uint64(v>>63)) }
func strLen(s string) int     { return uvarintLen(uint64(len(s))) + len(s) }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendEntry(b []byte, e *Entry, l layout) []byte {
	b = appendString(b, e.Name)
	b = append(b, byte(e.Kind))
	b = binary.AppendUvarint(b, uint64(e.Mode))
	b = binary.AppendUvarint(b, uint64(e.UID))
	b = binary.AppendUvarint(b, uint64(e.GID))
	b = binary.AppendVarint(b, e.MtimeNs)
	b = binary.AppendVarint(b, e.CtimeNs)
	b = l.appendTimes(b, e.AtimeNs, e.BtimeNs)
	switch e.Kind {
	case KindFile:
		b = binary.AppendUvarint(b, uint64(e.Size))
		b = append(b, e.Depth)
		if e.Depth == 0 {
			for i := range e.Chunks {
				b = append(b, e.Chunks[i][:]...)
			}
		} else {
			b = append(b, e.Index[:]...)
		}
	case KindDir:
		b = append(b, e.Tree[:]...)
	case KindSymlink:
		b = appendString(b, e.Target)
	case KindCharDev, KindBlockDev:
		b = binary.AppendUvarint(b, uint64(e.Rdev))
	}
	b = appendXattrs(b, e.Xattrs)
	b = binary.AppendUvarint(b, e.LinkID)
	if e.LinkID != 0 {
		b = binary.AppendUvarint(b, uint64(e.Nlink))
	}
	return b
}

func xattrsLen(xs []Xattr) int {
	n := uvarintLen(uint64(len(xs)))
	for _, x := range xs {
		n += strLen(x.Name) + uvarintLen(uint64(len(x.Value))) + len(x.Value)
	}
	return n
}

func appendXattrs(b []byte, xs []Xattr) []byte {
	b = binary.AppendUvarint(b, uint64(len(xs)))
	for _, x := range xs {
		b = appendString(b, x.Name)
		b = binary.AppendUvarint(b, uint64(len(x.Value)))
		b = append(b, x.Value...)
	}
	return b
}

// DecodeTree parses and validates a tree node. It accepts only the
// canonical encoding: EncodeTree of the result returns exactly b. The
// result does not alias b.
func DecodeTree(b []byte) (*Tree, error) {
	if len(b) > MaxNodeSize {
		return nil, errf(ErrTooLarge, "tree: %d bytes, over %d", len(b), MaxNodeSize)
	}
	if err := checkHeader(b, treeMagic, "tree", BtimeTreeVersion); err != nil {
		return nil, err
	}
	version := b[len(treeMagic)]
	l := layoutOf(version)
	// One copy of the input; names and targets are substrings of it.
	d := decoder{s: string(b[headerLen:])}
	count := d.uvarint(MaxTreeEntries)
	if d.err != nil {
		return nil, d.fail("tree: entry count")
	}
	if count > uint64(len(d.s)/minEntryLen) {
		return nil, errf(ErrMalformed, "tree: %d entries cannot fit in %d bytes", count, len(d.s))
	}
	t := &Tree{Entries: make([]Entry, count)}
	// Inline chunk refs of all entries share backing arrays, allocated in
	// blocks.
	var refs []cas.Ref
	for i := range t.Entries {
		e := &t.Entries[i]
		e.Name = d.str(MaxNameLen)
		e.Kind = Kind(d.byte())
		e.Mode = uint32(d.uvarint(math.MaxUint32))
		e.UID = uint32(d.uvarint(math.MaxUint32))
		e.GID = uint32(d.uvarint(math.MaxUint32))
		e.MtimeNs = d.varint()
		e.CtimeNs = d.varint()
		e.AtimeNs, e.BtimeNs = d.times(l)
		if !d.body(e, &refs) && d.err == nil {
			return nil, errf(ErrInvalid, "tree: entry %d %q: unknown kind %d", i, e.Name, e.Kind)
		}
		e.Xattrs = d.xattrs()
		if e.LinkID = d.uvarint(math.MaxUint64); e.LinkID != 0 {
			e.Nlink = uint32(d.uvarint(math.MaxUint32))
		}
		if d.err != nil {
			return nil, d.fail("tree: entry %d", i)
		}
	}
	if len(d.s) != 0 && d.s[0] == selfMarker {
		d.s = d.s[1:]
		if t.Self = d.dirAttr(l); d.err != nil {
			return nil, d.fail("tree: own attributes")
		}
	}
	if len(d.s) != 0 {
		return nil, errf(ErrMalformed, "tree: %d trailing bytes", len(d.s))
	}
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if want := treeVersion(t); version != want {
		return nil, errf(ErrMalformed, "tree: format version %d, want %d for these entries", version, want)
	}
	return t, nil
}

// body reads e's content by its kind, and reports whether the kind is
// known. refs is where inline chunk refs are appended (see DecodeTree).
func (d *decoder) body(e *Entry, refs *[]cas.Ref) bool {
	switch e.Kind {
	case KindFile:
		e.Size = int64(d.uvarint(math.MaxInt64))
		e.Depth = d.byte()
		if e.Depth != 0 {
			e.Index = d.ref()
			break
		}
		n := ChunkCount(e.Size)
		if n == 0 || n > MaxInlineChunks {
			break // validation reports n > MaxInlineChunks
		}
		if len(*refs)+n > cap(*refs) {
			*refs = make([]cas.Ref, 0, max(256, n))
		}
		start := len(*refs)
		for range n {
			*refs = append(*refs, d.ref())
		}
		e.Chunks = (*refs)[start:len(*refs):len(*refs)]
	case KindDir:
		e.Tree = d.ref()
	case KindSymlink:
		e.Target = d.str(MaxPathLen)
		e.Size = int64(len(e.Target))
	case KindFifo, KindSocket:
	case KindCharDev, KindBlockDev:
		e.Rdev = uint32(d.uvarint(math.MaxUint32))
	default:
		return false
	}
	return true
}

// dirAttr reads a tree's own attributes, after its marker.
func (d *decoder) dirAttr(l layout) *DirAttr {
	a := &DirAttr{}
	a.Mode = uint32(d.uvarint(math.MaxUint32))
	a.UID = uint32(d.uvarint(math.MaxUint32))
	a.GID = uint32(d.uvarint(math.MaxUint32))
	a.MtimeNs = d.varint()
	a.CtimeNs = d.varint()
	a.AtimeNs, a.BtimeNs = d.times(l)
	a.Xattrs = d.xattrs()
	return a
}

// times reads the optional times l holds (0 for those it does not).
func (d *decoder) times(l layout) (atime, btime int64) {
	if l.atimes {
		atime = d.varint()
	}
	if l.btimes {
		btime = d.varint()
	}
	return atime, btime
}

// treeVersion is the format version of t's encoding: the lowest that
// holds its entries, so that every tree has one encoding.
func treeVersion(t *Tree) byte {
	version := byte(FormatVersion)
	if a := t.Self; a != nil {
		switch {
		case a.BtimeNs != 0:
			return BtimeTreeVersion
		case a.AtimeNs != 0:
			version = AtimeTreeVersion
		}
	}
	for i := range t.Entries {
		switch e := &t.Entries[i]; {
		case e.BtimeNs != 0:
			return BtimeTreeVersion
		case e.AtimeNs != 0:
			version = AtimeTreeVersion
		case e.Kind.IsSpecial():
			version = max(version, SpecialTreeVersion)
		}
	}
	return version
}

// checkHeader checks b's magic and that its version is FormatVersion or
// at most latest.
func checkHeader(b []byte, magic, what string, latest byte) error {
	if len(b) < headerLen || string(b[:len(magic)]) != magic {
		return errf(ErrMalformed, "%s: missing %q header", what, magic)
	}
	if v := b[len(magic)]; v < FormatVersion || v > latest {
		if latest == FormatVersion {
			return errf(ErrUnsupportedVersion, "%s: format version %d, want %d", what, v, FormatVersion)
		}
		return errf(ErrUnsupportedVersion, "%s: format version %d, want %d to %d", what, v, FormatVersion, latest)
	}
	return nil
}

// decoder reads from s; the first error sticks and later reads return
// zero values, so callers check err once per entry.
type decoder struct {
	s   string
	err error
}

type decodeError string

func (e decodeError) Error() string { return string(e) }

var (
	errShort    = decodeError("truncated")
	errVarint   = decodeError("non-minimal or overflowing varint")
	errTooLarge = decodeError("value over its limit")
)

func (d *decoder) fail(format string, args ...any) error {
	return errf(ErrMalformed, format+": %v", append(args, d.err)...)
}

// uvarint reads a minimal uvarint no greater than limit.
func (d *decoder) uvarint(limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	// Fast path for the common one-byte case.
	if len(d.s) > 0 && d.s[0] < 0x80 {
		v := uint64(d.s[0])
		d.s = d.s[1:]
		if v > limit {
			d.err = errTooLarge
			return 0
		}
		return v
	}
	var v uint64
	for i := 0; i < len(d.s) && i < binary.MaxVarintLen64; i++ {
		c := d.s[i]
		if c < 0x80 {
			if c == 0 || i == binary.MaxVarintLen64-1 && c > 1 {
				d.err = errVarint // trailing zero byte, or over 64 bits
				return 0
			}
			v |= uint64(c) << (7 * i)
			d.s = d.s[i+1:]
			if v > limit {
				d.err = errTooLarge
				return 0
			}
			return v
		}
		v |= uint64(c&0x7f) << (7 * i)
	}
	if len(d.s) < binary.MaxVarintLen64 {
		d.err = errShort
	} else {
		d.err = errVarint
	}
	return 0
}

func (d *decoder) varint() int64 {
	u := d.uvarint(math.MaxUint64)
	return int64(u>>1) ^ -int64(u&1)
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.s) < 1 {
		d.err = errShort
		return 0
	}
	c := d.s[0]
	d.s = d.s[1:]
	return c
}

// xattrs reads a count and that many xattrs. Each takes at least 2 bytes,
// which bounds the allocation.
func (d *decoder) xattrs() []Xattr {
	nx := d.uvarint(uint64(len(d.s) / 2))
	if nx == 0 {
		return nil
	}
	xs := make([]Xattr, nx)
	for j := range xs {
		xs[j].Name = d.str(MaxXattrNameLen)
		if v := d.str(MaxXattrValueLen); v != "" {
			xs[j].Value = []byte(v)
		}
	}
	return xs
}

func (d *decoder) str(limit int) string {
	n := d.uvarint(uint64(limit))
	if d.err != nil {
		return ""
	}
	if uint64(len(d.s)) < n {
		d.err = errShort
		return ""
	}
	s := d.s[:n]
	d.s = d.s[n:]
	return s
}

func (d *decoder) ref() cas.Ref {
	var r cas.Ref
	if d.err != nil {
		return r
	}
	if len(d.s) < len(r) {
		d.err = errShort
		return r
	}
	copy(r[:], d.s)
	d.s = d.s[len(r):]
	return r
}
