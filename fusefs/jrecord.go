package fusefs

import (
	"encoding/binary"
	"hash/crc32"
	"sort"
	"strings"

	"github.com/homefs/homefs/manifest"
)

// The journal's records (HFJ4): every change served since the durable
// head, in the order it took effect, named by journal ids. A journal id
// names one node for one incarnation of the journal (from one reset to
// the next): 1 is the root, a node the head has gets one with a bind
// record (its path then), a node made since gets one with its create
// record. See doc.go, The journal.

// recKind is what a record says.
type recKind uint8

const (
	recWrite  recKind = iota + 1 // data at off; the file's size and times then
	recStage                     // the content is a staging file's first size bytes
	recBind                      // id names the node at path
	recCreate                    // a new node id named name in dir (dir 0: no name, O_TMPFILE)
	recLink                      // a new name for id
	recUnlink                    // name in dir removed (flags&1: a directory)
	recRename                    // name in dir moved to name2 in dir2 (flags: renameat2's)
	recTrunc                     // the file's size set to size
	recAlloc                     // fallocate of [off, off+size) with mode flags
	recAttr                      // the node's attributes, as of version ver
	recLive                      // from here on, the content is what backing file data holds, whole
	recUnlive                    // the backing file of the last live record was dropped: its content is final
	recDetach                    // the backing file of the last live record was dropped: the records after give the content
	recNext                      // the size records after are for the head of generation ver, should a flush move it there
)

const rootJID = 1

// attrSnap is a node's attributes in a record: recAttr's whole set, a
// write record's times only.
type attrSnap struct {
	mode, uid, gid             uint32
	atime, mtime, ctime, btime int64
	xattrs                     map[string][]byte
}

// journalRecord is one record. The formats before HFJ4 had writes and
// stage records only, named by path (path set, id 0); stageOff marks a
// stage record of theirs.
type journalRecord struct {
	kind recKind
	path string // HFJ1–3 records; a bind's path
	id   uint64
	// dir, name (and dir2, name2 for a rename) are the names a
	// namespace record changes.
	dir, dir2   uint64
	name, name2 string
	off, size   int64
	flags       uint32
	nkind       manifest.Kind // create: the node's kind
	rdev        uint32        // create: a device node's number
	// mtime and ctime are a write's (nanoseconds; 0 where unknown: a stage
	// record, or an HFJ2 or HFJ1 journal); ver orders a record's
	// attributes against the node's others (see applyAttr).
	mtime, ctime int64
	ver          uint64
	attr         *attrSnap
	// data is a write's bytes, a stage record's staging file name, a
	// symlink's target.
	data []byte
}

// stageOff marks a stage record of the formats before HFJ4.
const stageOff = -1

// appendTo appends r, framed (length, CRC) and tagged with nonce, to out.
func (r *journalRecord) appendTo(out []byte, nonce uint64) []byte {
	start := len(out)
	out = append(out, make([]byte, 8)...) // length and CRC, filled below
	out = binary.LittleEndian.AppendUint64(out, nonce)
	out = append(out, byte(r.kind))
	out = r.appendBody(out)
	payload := out[start+8:]
	binary.LittleEndian.PutUint32(out[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(out[start+4:], crc32.ChecksumIEEE(payload))
	return out
}

func appendString(out []byte, s string) []byte {
	out = binary.AppendUvarint(out, uint64(len(s)))
	return append(out, s...)
}

func appendI64(out []byte, v int64) []byte {
	return binary.LittleEndian.AppendUint64(out, uint64(v))
}

func (r *journalRecord) appendBody(out []byte) []byte {
	uv := binary.AppendUvarint
	switch r.kind {
	case recWrite:
		out = uv(out, r.id)
		out = appendI64(appendI64(out, r.off), r.size)
		out = appendI64(appendI64(out, r.mtime), r.ctime)
		out = uv(out, r.ver)
	case recStage:
		out = appendI64(uv(out, r.id), r.size)
	case recBind:
		out = uv(out, r.id)
		return append(out, r.path...)
	case recCreate:
		out = uv(uv(out, r.id), r.dir)
		out = uv(uv(out, uint64(r.nkind)), uint64(r.rdev))
		out = appendString(out, r.name)
	case recLink:
		out = uv(uv(out, r.id), r.dir)
		return append(out, r.name...)
	case recUnlink:
		out = uv(uv(out, r.dir), uint64(r.flags))
		return append(out, r.name...)
	case recRename:
		out = uv(uv(uv(out, r.dir), r.dir2), uint64(r.flags))
		out = appendString(out, r.name)
		return append(out, r.name2...)
	case recTrunc:
		out = appendI64(uv(out, r.id), r.size)
	case recAlloc:
		out = appendI64(appendI64(uv(out, r.id), r.off), r.size)
		out = uv(out, uint64(r.flags))
	case recAttr:
		out = r.attr.appendTo(uv(uv(out, r.id), r.ver))
	case recLive, recUnlive, recDetach:
		out = uv(out, r.id)
	case recNext:
		out = uv(uv(out, r.ver), uint64(r.size))
	}
	return append(out, r.data...)
}

func (a *attrSnap) appendTo(out []byte) []byte {
	uv := binary.AppendUvarint
	out = uv(uv(uv(out, uint64(a.mode)), uint64(a.uid)), uint64(a.gid))
	out = appendI64(appendI64(out, a.atime), a.mtime)
	out = appendI64(appendI64(out, a.ctime), a.btime)
	names := make([]string, 0, len(a.xattrs))
	for k := range a.xattrs {
		names = append(names, k)
	}
	sort.Strings(names)
	out = uv(out, uint64(len(names)))
	for _, k := range names {
		out = appendString(appendString(out, k), string(a.xattrs[k]))
	}
	return out
}

// reader decodes a record's body; a read past its end sets bad.
type reader struct {
	p   []byte
	bad bool
}

func (d *reader) uvarint() uint64 {
	v, k := binary.Uvarint(d.p)
	if k <= 0 {
		d.bad = true
		return 0
	}
	d.p = d.p[k:]
	return v
}

func (d *reader) u32() uint32 {
	v := d.uvarint()
	if v > 1<<32-1 {
		d.bad = true
	}
	return uint32(v)
}

func (d *reader) i64() int64 {
	if len(d.p) < 8 {
		d.bad = true
		return 0
	}
	v := int64(binary.LittleEndian.Uint64(d.p))
	d.p = d.p[8:]
	return v
}

func (d *reader) str() string {
	n := d.uvarint()
	if d.bad || n > uint64(len(d.p)) {
		d.bad = true
		return ""
	}
	s := string(d.p[:n])
	d.p = d.p[n:]
	return s
}

// rest returns what is left of the body.
func (d *reader) rest() []byte {
	p := d.p
	d.p = nil
	return p
}

// decodeRecordV4 decodes an HFJ4 record's payload after its nonce, and
// checks what replay relies on: names and paths valid, offsets and sizes
// in range.
func decodeRecordV4(p []byte) (journalRecord, bool) {
	if len(p) < 1 {
		return journalRecord{}, false
	}
	r := journalRecord{kind: recKind(p[0])}
	d := &reader{p: p[1:]}
	switch r.kind {
	case recWrite:
		r.id = d.uvarint()
		r.off, r.size = d.i64(), d.i64()
		r.mtime, r.ctime = d.i64(), d.i64()
		r.ver = d.uvarint()
		r.data = d.rest()
	case recStage:
		r.id, r.size = d.uvarint(), d.i64()
		r.data = d.rest()
	case recBind:
		r.id = d.uvarint()
		r.path = string(d.rest())
	case recCreate:
		r.id, r.dir = d.uvarint(), d.uvarint()
		r.nkind, r.rdev = manifest.Kind(d.u32()), d.u32()
		r.name = d.str()
		r.data = d.rest()
	case recLink:
		r.id, r.dir = d.uvarint(), d.uvarint()
		r.name = string(d.rest())
	case recUnlink:
		r.dir, r.flags = d.uvarint(), d.u32()
		r.name = string(d.rest())
	case recRename:
		r.dir, r.dir2, r.flags = d.uvarint(), d.uvarint(), d.u32()
		r.name = d.str()
		r.name2 = string(d.rest())
	case recTrunc:
		r.id, r.size = d.uvarint(), d.i64()
	case recAlloc:
		r.id, r.off, r.size = d.uvarint(), d.i64(), d.i64()
		r.flags = d.u32()
	case recAttr:
		r.id, r.ver = d.uvarint(), d.uvarint()
		r.attr = d.attr()
	case recLive, recUnlive, recDetach:
		r.id = d.uvarint()
		r.data = d.rest()
	case recNext:
		r.ver = d.uvarint()
		r.size = int64(d.uvarint())
	default:
		return journalRecord{}, false
	}
	if d.bad || len(d.p) > 0 || !r.valid() {
		return journalRecord{}, false
	}
	return r, true
}

func (d *reader) attr() *attrSnap {
	a := &attrSnap{mode: d.u32(), uid: d.u32(), gid: d.u32()}
	a.atime, a.mtime, a.ctime, a.btime = d.i64(), d.i64(), d.i64(), d.i64()
	n := d.uvarint()
	if n > uint64(len(d.p)) { // each takes two bytes at least
		d.bad = true
		return a
	}
	for range n {
		k, v := d.str(), d.str()
		if d.bad {
			return a
		}
		if a.xattrs == nil {
			a.xattrs = make(map[string][]byte, n)
		}
		a.xattrs[k] = []byte(v)
	}
	return a
}

// valid checks a decoded record's fields.
func (r *journalRecord) valid() bool {
	switch r.kind {
	case recWrite, recStage, recTrunc, recAlloc, recLive, recUnlive, recDetach:
		return r.id != 0 && r.validContent()
	case recBind, recCreate, recLink, recUnlink, recRename:
		return r.validNames()
	case recAttr:
		return r.id != 0 && r.attr.mode <= 0o7777
	case recNext:
		return r.ver != 0 && r.size >= 0 && len(r.data) == 0
	}
	return false
}

func inFile(off, n int64) bool { return off >= 0 && n >= 0 && off <= maxFileSize-n }

// validContent checks a record of a file's content.
func (r *journalRecord) validContent() bool {
	switch r.kind {
	case recWrite:
		return r.size >= 0 && r.size <= maxFileSize && inFile(r.off, int64(len(r.data)))
	case recStage:
		return r.size >= 0 && r.size <= maxFileSize && checkName(string(r.data)) == nil
	case recTrunc:
		return r.size >= 0 && r.size <= maxFileSize
	case recLive:
		return checkName(string(r.data)) == nil
	case recUnlive, recDetach:
		return len(r.data) == 0
	}
	return r.size > 0 && inFile(r.off, r.size) // recAlloc
}

// validNames checks a record of names.
func (r *journalRecord) validNames() bool {
	okName := func(s string) bool { return checkName(s) == nil }
	switch r.kind {
	case recBind:
		return r.id > rootJID && manifest.ValidatePath(r.path) == nil
	case recCreate:
		named := r.dir == 0 && r.name == "" || r.dir != 0 && okName(r.name)
		return r.id > rootJID && named && validKind(r.nkind)
	case recLink:
		return r.id != 0 && r.dir != 0 && okName(r.name)
	case recUnlink:
		return r.dir != 0 && r.flags <= 1 && okName(r.name)
	}
	return r.dir != 0 && r.dir2 != 0 && okName(r.name) && okName(r.name2) // recRename
}

func validKind(k manifest.Kind) bool {
	return k == manifest.KindFile || k == manifest.KindDir || k == manifest.KindSymlink || k.IsSpecial()
}

// decodeRecordV3 decodes a record of the formats before HFJ4 (a write or
// a stage record named by path) after its nonce; times says it carries
// mtime and ctime (HFJ3).
func decodeRecordV3(p []byte, times bool) (journalRecord, bool) {
	d := &reader{p: p}
	rec := journalRecord{kind: recWrite}
	l := d.uvarint()
	if d.bad || l > uint64(len(d.p)) {
		return journalRecord{}, false
	}
	rec.path = string(d.p[:l])
	d.p = d.p[l:]
	rec.off, rec.size = d.i64(), d.i64()
	if times {
		rec.mtime, rec.ctime = d.i64(), d.i64()
	}
	if d.bad || rec.size < 0 || manifest.ValidatePath(rec.path) != nil {
		return journalRecord{}, false
	}
	rec.data = d.rest()
	if rec.off == stageOff {
		// The staging file's name: one plain name in the backing directory.
		rec.kind = recStage
		name := string(rec.data)
		if rec.size > maxFileSize || name == "" || name == "." || name == ".." || len(name) > 255 || strings.ContainsAny(name, "/\x00") {
			return journalRecord{}, false
		}
		return rec, true
	}
	if rec.off < 0 || rec.off+int64(len(rec.data)) > maxFileSize {
		return journalRecord{}, false
	}
	return rec, true
}
