package fusefs

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/manifest"
)

// The journal's design: see doc.go, The journal.

const (
	journalMagic = "HFJ4"
	// journalHeaderLen is magic, generation, nonce, the boot id of the
	// host that wrote the header, and the header's CRC.
	journalHeaderLen = len(journalMagic) + 8 + 8 + bootIDLen + 4
	// journalHeaderLenV2 is HFJ2's: no boot id.
	journalHeaderLenV2 = len(journalMagic) + 8 + 8 + 4
	// journalMaxBytes bounds a journal; past it, fsync flushes instead.
	// Once it is half full, the periodic flush goroutine flushes the
	// session (flushSoon). It holds every byte written since the durable
	// head, or a live record of the file that holds it (small files' bytes
	// go into it as they are dropped: dropRecords), so it bounds the
	// unflushed bytes of a burst: an untar of Go's source tree (about 120
	// MB) fits in its first half.
	journalMaxBytes = 256 << 20
	// journalGrow is the step in which the file is preallocated; a reset
	// gives back what a burst made it grow past journalKeep.
	journalGrow = 1 << 20
	journalKeep = 8 << 20
	// journalMapAfter is how many bytes of records go in by pwrite after
	// an fdatasync before put copies them through the mapping again: a
	// writer that fsyncs at least that often never dirties a page through
	// the mapping (see journal.mem).
	journalMapAfter = 256 << 10
	// maxUnjournaled bounds the written bytes a file may carry into a
	// journaled fsync; past it the fsync flushes instead.
	maxUnjournaled = 8 << 20
)

var (
	errJournalFull   = errors.New("journal full")
	errJournalClosed = errors.New("journal closed")
)

// journal is a session's journal file. GUARDED_BY(mu) for every field.
type journal struct {
	mu   sync.Mutex
	path string
	// f is the open file, nil while the journal is parked (park): an idle
	// session holds neither its descriptor nor its mapping.
	f *os.File
	// closed is set by close: the journal is never reopened after it.
	closed bool
	size   int64  // end of the last record
	alloc  int64  // bytes of the file already written (zeros or old records)
	gen    uint64 // head generation the records apply to
	nonce  uint64 // tags this incarnation's records; never zero
	// unsynced is set while records written by write wait for an
	// fdatasync.
	unsynced bool
	// full is set once the journal refused a record, until the next
	// reset: it then takes no more, so that what it holds stays a prefix
	// of the writes made since the head (a replay never applies a write
	// without the ones before it).
	full bool
	// syncFailed: an fdatasync failed since the last reset (failSync).
	syncFailed bool
	buf        []byte // encoding buffer of write
	// mem maps the file's first journalMaxBytes (shared), so that write
	// puts a record into the page cache with a copy instead of a pwrite;
	// nil where the file cannot be mapped. Only the part below alloc, which
	// holds blocks (zeros or records), is ever touched: a store past the
	// file's end would be SIGBUS, and so could one into a hole on a full
	// disk. The copy wins only while nothing syncs: an fdatasync
	// write-protects every page the mapping dirtied (an rmap walk and a TLB
	// flush each) and the next store into it faults, which made a journal
	// synced every 32 records cost 25-85 µs a record against 9-30 µs
	// with pwrite. So put uses pwrite for the first journalMapAfter bytes
	// after each fdatasync (sinceSync).
	mem []byte
	// sinceSync counts the record bytes put since the last fdatasync. It
	// starts at journalMapAfter: a journal never synced uses the mapping.
	sinceSync int64
	// used is when a record was last put, in Unix nanoseconds (park).
	used int64
	// inc counts resets: a journal id (jops.go) names a node within one
	// incarnation. lastID is the last id given in it.
	inc, lastID uint64
	// half is set while the journal holds more than half of what it can
	// take (filling); read without mu.
	half atomic.Bool
}

// incarnation returns the journal's incarnation (see inc).
func (j *journal) incarnation() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.inc
}

// holds reports whether the journal holds a record (false for nil).
func (j *journal) holds() bool {
	if j == nil {
		return false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.size > int64(journalHeaderLen)
}

// filling reports whether the journal holds more than half of what it
// can take.
func (j *journal) filling() bool { return j.half.Load() }

// newID gives out a journal id of this incarnation.
func (j *journal) newID() (id, inc uint64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lastID++
	return j.lastID, j.inc
}

// span is a written byte range of a file.
type span struct{ off, end int64 }

// addSpan records [off, end) in spans, merging overlapping or adjacent
// ranges so the list stays short for appends and rewrites.
func addSpan(spans []span, off, end int64) []span {
	for i := range spans {
		if off <= spans[i].end && end >= spans[i].off {
			spans[i].off = min(spans[i].off, off)
			spans[i].end = max(spans[i].end, end)
			return spans
		}
	}
	return append(spans, span{off, end})
}

func journalPath(dir, session string) string {
	return filepath.Join(dir, "journal", session+".journal")
}

// openJournal opens (creating) the journal file of session under dir.
func openJournal(dir, session string) (*journal, error) {
	p := journalPath(dir, session)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return nil, fmt.Errorf("journal directory: %w", err)
	}
	j := &journal{path: p, lastID: rootJID, sinceSync: journalMapAfter}
	if err := j.open(); err != nil {
		return nil, err
	}
	return j, nil
}

// open opens (creating) the file and maps it. Called with mu held, or
// before j is shared.
func (j *journal) open() error {
	f, err := os.OpenFile(j.path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("open journal: %w", err)
	}
	// The file's name must be durable before a record in it counts.
	if d, err := os.Open(filepath.Dir(j.path)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	j.f, j.alloc, j.used = f, st.Size(), time.Now().UnixNano()
	if mem, err := unix.Mmap(int(f.Fd()), 0, journalMaxBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err == nil {
		j.mem = mem
	}
	return nil
}

// park closes the file of a journal that holds no record (every one it
// took is in the durable head, reset emptied it) and took none for idle
// as of now. The file keeps a
// header that no record follows, which a replay skips; the first record
// put after reopens the file and writes the current header first.
func (j *journal) park(now time.Time, idle time.Duration) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.f == nil || j.size > int64(journalHeaderLen) || j.unsynced || now.UnixNano()-j.used < idle.Nanoseconds() {
		return
	}
	j.unmap()
	j.f.Close()
	j.f = nil
}

// unpark reopens a parked journal and writes its header. Called with mu
// held.
func (j *journal) unpark() error {
	if j.f != nil {
		return nil
	}
	if j.closed {
		return errJournalClosed
	}
	if err := j.open(); err != nil {
		return err
	}
	if _, err := j.f.WriteAt(encodeJournalHeader(j.gen, j.nonce), 0); err != nil {
		j.unmap()
		j.f.Close()
		j.f = nil
		return fmt.Errorf("reopen journal: %w", err)
	}
	j.alloc = max(j.alloc, j.size)
	return nil
}

// unmap drops the mapping. Called with mu held.
func (j *journal) unmap() {
	if j.mem != nil {
		_ = unix.Munmap(j.mem)
		j.mem = nil
	}
}

func encodeJournalHeader(gen, nonce uint64) []byte {
	hdr := make([]byte, 0, journalHeaderLen)
	hdr = append(hdr, journalMagic...)
	hdr = binary.LittleEndian.AppendUint64(hdr, gen)
	hdr = binary.LittleEndian.AppendUint64(hdr, nonce)
	boot := bootID()
	hdr = append(hdr, boot[:]...)
	return binary.LittleEndian.AppendUint32(hdr, crc32.ChecksumIEEE(hdr))
}

// bootIDLen is the length of a boot id: the 128-bit UUID Linux draws at
// every boot.
const bootIDLen = 16

// bootID returns this boot's id, or zeros where it cannot be read.
var bootID = sync.OnceValue(func() [bootIDLen]byte {
	var id [bootIDLen]byte
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return id
	}
	h, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(string(b)), "-", ""))
	if err == nil && len(h) == bootIDLen {
		copy(id[:], h)
	}
	return id
})

// rebooted says whether a journal header's boot id names an earlier boot
// than this one; false where either is unknown.
func rebooted(header [bootIDLen]byte) bool {
	var zero [bootIDLen]byte
	now := bootID()
	return header != zero && now != zero && header != now
}

// newNonce returns a random nonzero tag.
func newNonce() uint64 {
	for {
		if n := rand.Uint64(); n != 0 {
			return n
		}
	}
}

// reset empties the journal and dedicates it to head generation gen. It
// need not be durable: a stale journal is recognised by its generation,
// and the next fdatasync carries the header with the first record.
func (j *journal) reset(gen uint64) error {
	_, err := j.resetWith(gen, nil)
	return err
}

// resetWith is reset with recs (liveBlock's, ids from 2 on) as the first
// records of the new incarnation, written right after its header, and
// returns the incarnation. A reset that gives back what a burst made the
// file grow comes after both: the old journal's tail may hold the next
// block (journalNext) a crash before the header's write would need.
func (j *journal) resetWith(gen uint64, recs []journalRecord) (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	nonce := newNonce()
	j.inc++
	j.lastID = rootJID + uint64(len(recs)/2)
	j.unsynced, j.full, j.syncFailed = false, false, false
	j.half.Store(false)
	if j.f == nil {
		// Parked: the header goes to the file when it is reopened (put).
		j.size, j.gen, j.nonce = int64(journalHeaderLen), gen, nonce
	} else {
		hdr := encodeJournalHeader(gen, nonce)
		if _, err := j.f.WriteAt(hdr, 0); err != nil {
			return j.inc, fmt.Errorf("reset journal: %w", err)
		}
		j.size, j.gen, j.nonce = int64(len(hdr)), gen, nonce
		j.alloc = max(j.alloc, j.size)
	}
	if len(recs) > 0 {
		j.buf = j.buf[:0]
		for i := range recs {
			j.buf = recs[i].appendTo(j.buf, j.nonce)
		}
		if err := j.put(j.buf); err != nil {
			return j.inc, fmt.Errorf("reset journal: %w", err)
		}
		j.unsynced = true
	}
	if j.f != nil && j.alloc > journalKeep {
		keep := max(journalGrow, (j.size+journalGrow-1)/journalGrow*journalGrow)
		if err := j.f.Truncate(keep); err != nil {
			return j.inc, fmt.Errorf("reset journal: %w", err)
		}
		j.alloc = keep
	}
	return j.inc, nil
}

// recordFormat is how a journal's records are encoded.
type recordFormat struct {
	nonce uint64 // this incarnation's; 0 in HFJ1, whose records have none
	times bool   // HFJ3 and after: records carry mtime and ctime
	v4    bool   // HFJ4: records of every kind, named by journal ids
	// boot is the boot id of the host that wrote the header (HFJ3 and
	// after; zeros before).
	boot [bootIDLen]byte
}

// minPayload is the length of the shortest valid record's payload.
func (f recordFormat) minPayload() int {
	if f.v4 {
		return 8 + 1 + 1 // nonce, kind, the shortest body (an unlive record: one id byte)
	}
	n := 1 + 8 + 8 // path length, offset, size
	if f.nonce != 0 {
		n += 8
	}
	if f.times {
		n += 16
	}
	return n
}

// append writes records and makes them durable (fdatasync), with every
// record write put before them.
func (j *journal) append(records []journalRecord) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	var buf []byte
	for i := range records {
		buf = records[i].appendTo(buf, j.nonce)
	}
	if err := j.put(buf); err != nil {
		return err
	}
	if err := fdatasync(j.f); err != nil {
		j.failSync()
		return fmt.Errorf("sync journal: %w", err)
	}
	j.unsynced, j.sinceSync = false, 0
	return nil
}

// write puts records into the journal file, all or none, without syncing
// them: once write returns, they survive a crash of the daemon (the page
// cache holds them), not a power loss, which only sync and append guard
// against. It costs a copy into the mapping, none of which waits for the
// disk.
func (j *journal) write(recs ...journalRecord) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = j.buf[:0]
	for i := range recs {
		j.buf = recs[i].appendTo(j.buf, j.nonce)
	}
	err := j.put(j.buf)
	if cap(j.buf) > 1<<20 {
		j.buf = nil // a large write's buffer is not kept
	}
	if err != nil {
		return err
	}
	j.unsynced = true
	return nil
}

// put writes encoded records at the journal's end: through the mapping, a
// copy into the page cache with no system call but the preallocation's
// (once a MiB), or with a pwrite where there is none or the journal was
// synced lately (see mem). Called with mu held.
// A record that does not fit, or fails to be written, makes the journal
// full until the next reset.
func (j *journal) put(buf []byte) error {
	if j.full {
		return errJournalFull
	}
	if err := j.unpark(); err != nil {
		// The caller flushes instead, as for a full journal.
		j.full = true
		return fmt.Errorf("%w: %w", errJournalFull, err)
	}
	j.used = time.Now().UnixNano()
	end, err := j.room(len(buf))
	if err != nil {
		return err
	}
	if j.viaMapping() {
		copy(j.mem[j.size:end], buf)
	} else if err := j.pwrite(buf, end); err != nil {
		// A part of the record may be in the file: its CRC fails, and it
		// ends a replay there.
		j.full = true
		return fmt.Errorf("append to journal: %w", err)
	}
	j.size = end
	j.sinceSync += int64(len(buf))
	j.half.Store(j.size > journalMaxBytes/2)
	return nil
}

// pwrite writes buf, records that end at end, at the journal's end. A
// record that starts a page of the file writes the rest of that page with
// zeros (where nothing is yet, past the end): the kernel then holds the
// page whole without reading it first, which a page written in part and
// not in the page cache (dropped, or a journal an earlier daemon left)
// would cost, a synchronous read of the disk on the write path. Called
// with mu held.
func (j *journal) pwrite(buf []byte, end int64) error {
	pad := 0
	if page := end &^ (pageBytes - 1); page >= j.size && end != page {
		pad = int(min(page+pageBytes, j.alloc) - end)
	}
	n, err := unix.Pwritev(int(j.f.Fd()), [][]byte{buf, zeroGrow[:pad]}, j.size)
	if err == nil && n < len(buf)+pad {
		err = io.ErrShortWrite
	}
	return err
}

// pageBytes is the page size pwrite rounds a record's write up to.
const pageBytes = 4096

// viaMapping reports whether put copies records through the mapping
// rather than pwrite them (see mem). Called with mu held.
func (j *journal) viaMapping() bool {
	return j.mem != nil && j.sinceSync >= journalMapAfter
}

// room makes the file hold blocks up to the end of n more bytes of
// records and returns that end. Called with mu held.
func (j *journal) room(n int) (int64, error) {
	end := j.size + int64(n)
	if j.full || end > journalMaxBytes {
		j.full = true
		return 0, errJournalFull
	}
	if end > j.alloc {
		// Preallocate the next steps with zeros; the fdatasync after it
		// pays the size change once, the following ones overwrite in place.
		grown := min((end+journalGrow-1)/journalGrow*journalGrow, journalMaxBytes)
		if err := allocZeros(j.f, j.alloc, grown-j.alloc); err != nil {
			j.full = true
			return 0, fmt.Errorf("grow journal: %w", err)
		}
		j.alloc = grown
	}
	return end, nil
}

// allocZeros writes zeros to [off, off+n) of f, a multiple of
// journalGrow: blocks written, rather than fallocated (unwritten), which
// the fdatasyncs after would convert one by one.
func allocZeros(f *os.File, off, n int64) error {
	for end := off + n; off < end; off += journalGrow {
		if _, err := f.WriteAt(zeroGrow[:], off); err != nil {
			return err
		}
	}
	return nil
}

var zeroGrow [journalGrow]byte

// sync makes every record written so far durable.
func (j *journal) sync() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.syncFailed {
		return errJournalFull
	}
	if !j.unsynced {
		return nil
	}
	if err := fdatasync(j.f); err != nil {
		j.failSync()
		return fmt.Errorf("sync journal: %w", err)
	}
	j.unsynced, j.sinceSync = false, 0
	return nil
}

// failSync notes an fdatasync of the journal that failed. Linux reports a
// writeback error once and marks the pages clean, so a later fdatasync
// would succeed with the records lost: until the next reset the journal
// takes no record and no sync succeeds, and every fsync flushes to the
// store instead. Called with mu held.
func (j *journal) failSync() {
	j.full, j.syncFailed = true, true
}

// started reports whether j was reset since it was opened: it has a
// generation and nonce of its own, and its records start after its
// header.
func (j *journal) started() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.nonce != 0
}

func (j *journal) close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.unmap()
	j.closed = true
	if j.f == nil {
		return nil
	}
	f := j.f
	j.f = nil
	return f.Close()
}

// readJournal returns the generation and the whole records of a journal,
// up to the first that is torn, damaged, zeros or of an earlier
// incarnation. Where intact records of this incarnation follow a damaged
// one (damage in the middle, not the torn tail of a crash), it returns
// those before the damage and a *JournalDamageError.
func readJournal(r io.Reader) (uint64, []journalRecord, error) {
	b, err := io.ReadAll(io.LimitReader(r, journalMaxBytes+journalGrow))
	if err != nil {
		return 0, nil, fmt.Errorf("read journal: %w", err)
	}
	gen, f, start, err := journalHeader(b)
	if err != nil {
		return 0, nil, err
	}
	recs, damage := readRecords(b, start, f)
	if damage != nil {
		return gen, recs, damage
	}
	return gen, recs, nil
}

// journalHeader reads the header of the journal b: the generation, how
// the records are encoded and where they start.
func journalHeader(b []byte) (gen uint64, f recordFormat, start int, err error) {
	if len(b) < len(journalMagic) {
		return 0, f, 0, fmt.Errorf("journal header: %w", io.ErrUnexpectedEOF)
	}
	switch magic := string(b[:len(journalMagic)]); magic {
	case journalMagic, journalMagicV3, journalMagicV2:
		n := journalHeaderLen
		if magic == journalMagicV2 {
			n = journalHeaderLenV2
		}
		if len(b) < n {
			return 0, f, 0, fmt.Errorf("journal header: %w", io.ErrUnexpectedEOF)
		}
		body := b[:n-4]
		if crc32.ChecksumIEEE(body) != binary.LittleEndian.Uint32(b[n-4:]) {
			return 0, f, 0, fmt.Errorf("journal header: bad checksum")
		}
		gen = binary.LittleEndian.Uint64(body[len(journalMagic):])
		// HFJ3 differs in its records (writes and stage records named by
		// path), HFJ2 also in records without times and no boot id.
		f = recordFormat{nonce: binary.LittleEndian.Uint64(body[len(journalMagic)+8:]), times: magic != journalMagicV2, v4: magic == journalMagic}
		if magic != journalMagicV2 {
			copy(f.boot[:], body[len(journalMagic)+16:])
		}
		return gen, f, n, nil
	case journalMagicV1:
		// The journal of earlier daemons (appended, truncated by every
		// reset, records without a nonce) is still replayed, so that an
		// upgrade after a crash loses nothing.
		if len(b) < len(journalMagicV1)+8 {
			return 0, f, 0, fmt.Errorf("journal header: %w", io.ErrUnexpectedEOF)
		}
		return binary.LittleEndian.Uint64(b[len(journalMagicV1):]), f, len(journalMagicV1) + 8, nil
	}
	return 0, f, 0, fmt.Errorf("journal header: bad magic")
}

// mapJournal maps the journal file f for reading; unmap gives it back.
// The records readRecords finds in it point into the mapping.
func mapJournal(f *os.File) (b []byte, unmap func(), err error) {
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("read journal: %w", err)
	}
	if st.Size() == 0 {
		return nil, func() {}, nil
	}
	b, err = unix.Mmap(int(f.Fd()), 0, int(min(st.Size(), journalMaxBytes+journalGrow)), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("read journal: %w", err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}

// The formats of earlier daemons, still replayed: HFJ3 (writes and stage
// records only, named by path), HFJ2 (no times either) and HFJ1 (no
// nonces either).
const (
	journalMagicV3 = "HFJ3"
	journalMagicV2 = "HFJ2"
	journalMagicV1 = "HFJ1"
)

// ErrJournalDamaged marks a session whose journal is damaged in its
// middle: replaying it would silently drop acknowledged writes.
var ErrJournalDamaged = errors.New("session journal damaged")

// JournalDamageError says where a journal is damaged and what a replay of
// the records before the damage would drop.
type JournalDamageError struct {
	Path   string // the journal file ("" until the replay names it)
	Offset int64  // of the first damaged record
	// Records and Bytes are the intact records after the damage, and the
	// bytes from Offset to the end of the last of them.
	Records int
	Bytes   int64
	Copy    string // where a copy of the journal is kept
}

func (e *JournalDamageError) Error() string {
	return fmt.Sprintf("%v: %s: the record at offset %d fails its checksum and %d intact records "+
		"(%d bytes from it on) follow it, acknowledged writes that a replay of what precedes the damage "+
		"would drop; the journal is left as it is (a copy is at %s); to mount the session with the records "+
		"before the damage only, restart the daemon with homefs serve --salvage",
		ErrJournalDamaged, e.Path, e.Offset, e.Records, e.Bytes, e.Copy)
}

func (e *JournalDamageError) Unwrap() error { return ErrJournalDamaged }

// frame is what readFrame found at an offset.
type frame int

const (
	frameRecord frame = iota // an intact record of this incarnation
	frameEnd                 // zeros, the end, or a record of an earlier incarnation
	frameBad                 // torn or damaged
)

// readFrame reads the record at off of b, encoded as f: its state, and
// for an intact one the record and its end.
func readFrame(b []byte, off int, f recordFormat) (journalRecord, int, frame) {
	if len(b)-off < 8 {
		return journalRecord{}, 0, frameEnd
	}
	n := int(binary.LittleEndian.Uint32(b[off:]))
	sum := binary.LittleEndian.Uint32(b[off+4:])
	if n == 0 && sum == 0 {
		return journalRecord{}, 0, frameEnd // the preallocated zeros
	}
	if n > len(b)-off-8 {
		return journalRecord{}, 0, frameBad
	}
	p := b[off+8 : off+8+n]
	if crc32.ChecksumIEEE(p) != sum {
		return journalRecord{}, 0, frameBad
	}
	if f.nonce != 0 {
		if n < f.minPayload() {
			return journalRecord{}, 0, frameBad
		}
		if binary.LittleEndian.Uint64(p) != f.nonce {
			// A record left from before the last reset has another nonce.
			return journalRecord{}, 0, frameEnd
		}
		p = p[8:]
	}
	var rec journalRecord
	var ok bool
	if f.v4 {
		rec, ok = decodeRecordV4(p)
	} else {
		rec, ok = decodeRecordV3(p, f.times)
	}
	if !ok {
		return journalRecord{}, 0, frameBad
	}
	return rec, off + 8 + n, frameRecord
}

// readRecords reads the records from off of b up to the first that is not
// intact. For the HFJ2 format (nonce != 0) it then looks for an intact
// record of this incarnation further on, byte by byte: a crash leaves a
// torn record only at the end (what follows it is zeros or records of an
// earlier incarnation), so such a record means the journal was damaged.
func readRecords(b []byte, off int, f recordFormat) ([]journalRecord, *JournalDamageError) {
	var out []journalRecord
	for {
		rec, end, st := readFrame(b, off, f)
		switch {
		case st == frameRecord:
			out = append(out, rec)
			off = end
			continue
		case st == frameBad && f.nonce != 0:
			return out, damageAfter(b, off, f)
		}
		return out, nil
	}
}

// damageAfter reports the intact records of this incarnation after the
// bad record at bad, or nil where there are none (a torn tail).
func damageAfter(b []byte, bad int, f recordFormat) *JournalDamageError {
	var d *JournalDamageError
	least := f.minPayload()
	for p := bad + 1; p+8+least <= len(b); p++ {
		// Cheap tests first: a frame whose length fits and whose nonce is
		// this incarnation's.
		n := int(binary.LittleEndian.Uint32(b[p:]))
		if n < least || n > len(b)-p-8 || binary.LittleEndian.Uint64(b[p+8:]) != f.nonce {
			continue
		}
		if _, end, st := readFrame(b, p, f); st == frameRecord {
			if d == nil {
				d = &JournalDamageError{Offset: int64(bad)}
			}
			d.Records++
			d.Bytes = int64(end - bad)
			p = end - 1
		}
	}
	return d
}

// pathOf returns n's path from the session root, through any of its
// names. Called with treeMu held.
func (s *Session) pathOf(n *node) (string, bool) {
	var parts []string
	cur := n
	for cur != s.root {
		var dir *node
		if cur.isDir() {
			dir = cur.parent
		} else {
			for p := range cur.parents {
				dir = p
				break
			}
		}
		if dir == nil {
			return "", false // unlinked or removed
		}
		name := ""
		for nm, c := range dir.children {
			if c == cur {
				name = nm
				break
			}
		}
		if name == "" {
			return "", false
		}
		parts = append(parts, name)
		cur = dir
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/"), len(parts) > 0
}

// journalFsync makes n's written bytes durable through the journal, when
// that is enough: it reports false when the fsync needs a full flush (a
// change since the durable head is not in the journal, no journal, too
// much data, not a file). A directory's fsync flushes: `sync DIR` is how
// a user makes every file durable, staged files' bytes included, which
// the journal does not hold.
func (s *Session) journalFsync(ctx context.Context, n *node) (bool, error) {
	if s.journal == nil || n.kind != manifest.KindFile {
		return false, nil
	}
	s.freeze.RLock()
	defer s.freeze.RUnlock()
	id := s.lockedJID(n)
	if id == 0 {
		return false, nil
	}

	n.mu.Lock()
	d := n.data
	var total int64
	for _, sp := range d.unjournaled {
		total += sp.end - sp.off
	}
	if total > maxUnjournaled {
		n.mu.Unlock()
		return false, nil
	}
	records := make([]journalRecord, 0, len(d.unjournaled))
	for _, sp := range d.unjournaled {
		end := min(sp.end, d.size)
		if end <= sp.off {
			continue
		}
		buf := make([]byte, end-sp.off)
		if _, err := n.readAt(ctx, buf, sp.off); err != nil {
			n.mu.Unlock()
			return false, err
		}
		records = append(records, n.writeRecord(id, sp.off, buf))
	}
	if len(records) == 0 && len(d.unjournaled) == 0 {
		// Everything written since it was last made durable is in the
		// journal already (logWrite), waiting for an fdatasync.
		n.mu.Unlock()
		return journalSynced(s.journal.sync())
	}
	if len(records) == 0 {
		records = append(records, n.writeRecord(id, d.size, nil))
	}
	// The records go in under n.mu: a write to the same bytes journaled
	// between the copy above and them would come first, and a replay,
	// which applies records in order, would undo it. The fdatasync waits
	// with n.mu free.
	if err := s.journal.write(records...); err != nil {
		n.mu.Unlock()
		return journalSynced(err)
	}
	pending := d.unjournaled
	d.unjournaled = nil
	n.mu.Unlock()
	if err := s.journal.sync(); err != nil {
		// Give the ranges back: the next fsync must still cover them.
		n.mu.Lock()
		for _, sp := range pending {
			d.unjournaled = addSpan(d.unjournaled, sp.off, sp.end)
		}
		n.mu.Unlock()
		return journalSynced(err)
	}
	return true, nil
}

// journalSynced is journalFsync's answer after the journal's write or
// sync answered err: done, a flush instead (the journal is full, or an
// fdatasync of it failed before), or the error.
func journalSynced(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, errJournalFull):
		return false, nil
	}
	return false, err
}

// writeRecord returns a write record of data at off of the file n
// (journal id id), with its size and times now. Called with n.mu held.
func (n *node) writeRecord(id uint64, off int64, data []byte) journalRecord {
	n.aver++
	return journalRecord{kind: recWrite, id: id, off: off, size: n.data.size, mtime: n.mtime, ctime: n.ctime, ver: n.aver, data: data}
}

// writeID returns the journal id under which a write to n can be
// journaled (logWrite), or 0 when none can: a change since the durable
// head is not in the journal, or n has no name. Called with freeze held
// shared, before n.mu.
func (s *Session) writeID(n *node) uint64 {
	if s.journal == nil || n.kind != manifest.KindFile {
		return 0
	}
	return s.lockedJID(n)
}

// logWrite puts a served write of data at off into the journal before the
// write is acknowledged, so that a crash of the daemon loses no write it
// acknowledged (a replay applies it), fsynced or not; an fsync then only
// syncs the journal. attrs adds a record of n's attributes (the write
// dropped privileges). It reports false when the write could not be
// journaled: id is 0 (see writeID), a change since writeID found it is
// not in the journal, or the journal is full. full reports the last: the
// caller then flushes before it acknowledges. Called with freeze held
// shared and n.mu held, after the write was applied.
func (s *Session) logWrite(n *node, id uint64, data []byte, off int64, attrs bool) (logged, full bool) {
	if id == 0 || !s.journaling() {
		// A journal that misses a change replays only what came before
		// it: the next flush takes the rest.
		return false, false
	}
	var err error
	if attrs {
		err = s.journal.write(n.writeRecord(id, off, data), n.attrRecord(id))
	} else {
		err = s.journal.write(n.writeRecord(id, off, data))
	}
	if err != nil {
		if !errors.Is(err, errJournalFull) {
			s.log.Warn("journal refused a write: flushing instead", "session", s.name, "err", err)
		}
		return false, true
	}
	s.markChanged(n)
	s.flushSoon()
	return true, false
}

// replayStats is what a replay did: records read, records applied (the
// others were superseded by a later stage record of the same file) and
// bytes read from staging files.
type replayStats struct {
	records, applied int
	stagedBytes      int64
}

// replayJournal applies the journal of s, if it belongs to the head s was
// loaded from, and reports whether it applied anything. Called before the
// session is shown anywhere, and before it has a journal to record in.
//
// A stage record makes a file's content what its staging file holds,
// whatever earlier records wrote to it, so only the last stage record of
// each file is applied, with the records of its content after it: a file
// fsynced N times through its staging file is read once, not N times (a
// 25 MB file fsynced 11,525 times read 146 GB and took 327 s to
// remount). The outcome is the in-order replay's.
//
// A journal damaged in its middle (JournalDamageError) is copied aside
// and refused, unless salvage is set: then the records before the damage
// are applied and the rest dropped, as a torn tail would be.
func (s *Session) replayJournal(ctx context.Context, path string, salvage bool) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	// Mapped, not read: the records end long before the preallocated end,
	// and the pages past them are touched only to look for damage.
	b, unmap, err := mapJournal(f)
	if err != nil {
		return false, err
	}
	defer unmap()
	gen, format, start, err := journalHeader(b)
	if err != nil || gen != s.gen && gen+1 != s.gen {
		return false, nil // empty, or stale: the head already moved past it
	}
	records, damage := readRecords(b, start, format)
	if damage != nil {
		// After a reboot (a power loss, say) records that were never
		// synced may have reached the disk out of order: a torn one
		// followed by intact ones is then the tail a crash may cut, which
		// no promise covers, not damage. Within one boot the page cache
		// holds the journal whole, so a bad record before good ones is.
		if err := s.damagedJournal(f, damage, path, salvage || rebooted(format.boot)); err != nil {
			return false, err
		}
	}
	if records = forHead(records, gen, s.gen); len(records) == 0 {
		return false, nil
	}
	superseded := supersededRecords(records)
	s.replayed.records = len(records)
	r := newReplayer(s)
	for i := range records {
		if superseded[i] {
			continue
		}
		s.replayed.applied++
		if err := r.apply(ctx, &records[i]); err != nil {
			return false, fmt.Errorf("replay journal of %s: record %d of %d: %w", s.name, i+1, len(records), err)
		}
	}
	if err := r.finish(ctx); err != nil {
		return false, fmt.Errorf("replay journal of %s: %w", s.name, err)
	}
	return true, nil
}

// forHead returns the records of a journal of head generation gen that
// apply to the head of generation head: for its own head, every record
// but the next blocks (journalNext), whose flush did not move the head;
// for the head one flush later, which moved it and then crashed before
// the journal's reset, the last block made for that head, alone (every
// other record is in the head).
func forHead(records []journalRecord, gen, head uint64) []journalRecord {
	var own, block []journalRecord
	for i := 0; i < len(records); i++ {
		r := records[i]
		if r.kind != recNext {
			own = append(own, r)
			continue
		}
		end := min(len(records), i+1+int(r.size))
		if r.ver == head {
			block = records[i+1 : end]
		}
		i = end - 1
	}
	if gen == head {
		return own
	}
	return block
}

// supersededRecords marks the records of a file's content (writes,
// truncations, allocations) that a later stage record of the same file
// makes moot. A file is its journal id, or in the formats before HFJ4
// (which hold no change of names) its path: two names of a hard link are
// then two files, which costs a replay work, never a byte.
func supersededRecords(records []journalRecord) []bool {
	type key struct {
		id   uint64
		path string
	}
	lastStage := make(map[key]int)
	for i, r := range records {
		if r.kind == recStage {
			lastStage[key{r.id, r.path}] = i
		}
	}
	out := make([]bool, len(records))
	live := make(map[uint64]bool) // a live record's file sets the content (replayer.fromBacking)
	for i, r := range records {
		switch r.kind {
		case recLive:
			live[r.id] = true
		case recUnlive, recDetach:
			delete(live, r.id)
		case recWrite, recTrunc, recAlloc, recStage:
			if last, ok := lastStage[key{r.id, r.path}]; ok && i < last || live[r.id] {
				out[i] = true
			}
		}
	}
	return out
}

// damagedJournal keeps a copy of the damaged journal f (at path) beside
// it and refuses it, or with salvage lets the replay drop what follows the
// damage.
func (s *Session) damagedJournal(f *os.File, damage *JournalDamageError, path string, salvage bool) error {
	damage.Path = path
	cp, err := keepJournalCopy(f, fmt.Sprintf("%s.damaged-%d", path, damage.Offset))
	if err != nil {
		return fmt.Errorf("session %s: %w (keeping a copy of it: %w)", s.name, damage, err)
	}
	damage.Copy = cp
	if !salvage {
		return fmt.Errorf("session %s: %w", s.name, damage)
	}
	s.log.Warn("replaying the journal up to a bad record and dropping the records after it (salvage, or unsynced records torn by a reboot)",
		"session", s.name, "journal", path, "offset", damage.Offset, "records_dropped", damage.Records,
		"bytes_dropped", damage.Bytes, "copy", cp)
	return nil
}

// keepJournalCopy copies f durably to dst, unless dst exists already (an
// earlier refusal kept it), and returns dst.
func keepJournalCopy(f *os.File, dst string) (string, error) {
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".copy-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, io.NewSectionReader(f, 0, 1<<62))
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), dst)
	}
	if err != nil {
		return "", err
	}
	if d, err := os.Open(filepath.Dir(dst)); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return dst, nil
}

// walkFile finds the regular file at path.
func (s *Session) walkFile(ctx context.Context, path string) (*node, error) {
	n, err := s.walk(ctx, path)
	if err != nil {
		return nil, err
	}
	if n.kind != manifest.KindFile {
		return nil, fmt.Errorf("%s: not a regular file", path)
	}
	return n, nil
}

// Fsync makes everything written to n durable: through the journal when
// that is enough, else by a flush of the whole session that moves its head
// (flushNow). A file with no name (O_TMPFILE, or unlinked) has nothing to
// make durable: no tree will hold it unless a link names it, and that
// change is made durable as any other.
func (s *Session) Fsync(ctx context.Context, n *node) error {
	if n.kind == manifest.KindFile && !s.hasName(n) {
		return nil
	}
	if staged, err := s.fsyncStaged(ctx, n); staged || err != nil {
		return err
	}
	if _, err := s.ingestNode(ctx, n); err != nil {
		return err
	}
	done, err := s.journalFsync(ctx, n)
	if err != nil || done {
		return err
	}
	// The flush merges overlays with their stored bases: those only a
	// remote has are fetched first, with no lock held (and off the ring).
	if err := s.fetchBases(ctx); err != nil {
		return err
	}
	return s.flushNow(ctx)
}
