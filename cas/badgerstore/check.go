package badgerstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/atomicfile"
)

// Badger meets damage in two ways that a store must not accept. At open it
// replays the newest value log and every write-ahead log (.mem) and cuts
// each at the first entry whose checksum fails, taking it for the torn tail
// of a crash: a flipped byte in the middle of the newest value log silently
// drops every acknowledged entry after it. And a table (.sst) whose
// structure is damaged (truncated, say) panics in one of Badger's own
// goroutines, which no recover reaches, at open or at the next compaction.
//
// CheckFiles looks before Badger does. It reads the logs the way Badger's
// replay does, and where the replay would stop it looks at what follows: a
// crash leaves at most one torn transaction and then zeros (or, after a
// power loss, unsynced garbage), never an intact entry; an intact entry
// past the cut means the cut would drop acknowledged data. It opens every
// table with Badger's table reader, verifying every block's checksum, in
// its own goroutine where a panic is recovered. The one damage it cannot
// tell from a crash is a flip inside the last transaction of the newest
// log: nothing after it says it was complete.

// ErrDamaged marks a store whose files are damaged in a way Badger would
// not report (it would drop data silently or crash): Open refuses it
// and leaves every file as it is, unless Options.Salvage is set.
var ErrDamaged = errors.New("cas: store files damaged")

// Damage is one finding of CheckFiles.
type Damage struct {
	File   string // name in the store's directory
	Offset int64  // where the damage starts; -1 when unknown
	What   string
	// Salvageable: a salvage can open the store (see salvageLog); a
	// damaged table cannot be opened.
	Salvageable bool
}

func (d Damage) String() string {
	if d.Offset < 0 {
		return fmt.Sprintf("%s: %s", d.File, d.What)
	}
	return fmt.Sprintf("%s at offset %d: %s", d.File, d.Offset, d.What)
}

// Badger's log format (memtable.go and value.go of badger/v4): a 20-byte
// file header, then entries of a header (meta, user meta, uvarint key
// length, value length and expiry), key, value and a big-endian CRC-32C of
// all three. Entries of a transaction carry bitTxn and end with an entry
// carrying bitFinTxn whose value is the commit timestamp in decimal.
const (
	logFileHeader = 20
	logBitTxn     = 1 << 6
	logBitFinTxn  = 1 << 7
	// Bounds an entry homefs writes stays within: keys are short, values
	// at most an encoded chunk. The search past a cut uses them to skip
	// bytes that cannot start an entry before computing a checksum.
	logMaxKey   = 1 << 10
	logMaxValue = cas.MaxChunkSize + 1<<10
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

type logEntry struct {
	meta       byte
	key, value []byte
	next       int // offset of the entry after it
}

// parseLogEntry parses the entry at off; ok is false unless an intact one
// (checksum correct, non-empty key) starts there.
func parseLogEntry(b []byte, off int) (e logEntry, ok bool) {
	p := off + 2
	if p > len(b) {
		return e, false
	}
	var lens [3]uint64
	for i := range lens {
		v, k := binary.Uvarint(b[min(p, len(b)):])
		if k <= 0 {
			return e, false
		}
		lens[i], p = v, p+k
	}
	klen, vlen := lens[0], lens[1]
	if klen == 0 || klen > logMaxKey || vlen > logMaxValue || uint64(len(b)-p) < klen+vlen+4 {
		return e, false
	}
	end := p + int(klen+vlen)
	if binary.BigEndian.Uint32(b[end:]) != crc32.Checksum(b[off:end], castagnoli) {
		return e, false
	}
	return logEntry{meta: b[off], key: b[p : p+int(klen)], value: b[p+int(klen) : end], next: end + 4}, true
}

// keyTS is the version Badger appends to a key (y.ParseTs).
func keyTS(key []byte) uint64 {
	if len(key) <= 8 {
		return 0
	}
	return math.MaxUint64 - binary.BigEndian.Uint64(key[len(key)-8:])
}

// replayEnd is where Badger's replay of a log stops (logFile.iterate): the
// end of its last complete transaction or lone entry. stop is where the
// replay met the entry it could not take.
func replayEnd(b []byte) (end, stop int) {
	end, off := logFileHeader, logFileHeader
	var commit uint64
	for {
		e, ok := parseLogEntry(b, off)
		if !ok {
			return end, off
		}
		switch {
		case e.meta&logBitTxn != 0:
			ts := keyTS(e.key)
			if commit == 0 {
				commit = ts
			}
			if commit != ts {
				return end, off
			}
		case e.meta&logBitFinTxn != 0:
			ts, err := strconv.ParseUint(string(e.value), 10, 64)
			if err != nil || ts != commit {
				return end, off
			}
			commit, end = 0, e.next
		default:
			if commit != 0 {
				return end, off
			}
			end = e.next
		}
		off = e.next
	}
}

// checkLog returns the damage in log b, if any: an intact entry after the
// point where the replay stops.
func checkLog(name string, b []byte) *Damage {
	if len(b) < logFileHeader {
		return nil // Badger writes the header first; a shorter file is new
	}
	end, stop := replayEnd(b)
	last := nonZeroLen(b[stop:])
	if last == 0 {
		return nil // zeros after the cut: a clean end
	}
	for p := stop + 1; p < stop+last; p++ {
		if b[p]&0x30 != 0 {
			continue // bits Badger never sets in meta
		}
		if _, ok := parseLogEntry(b, p); ok {
			if repairable(b, stop, p) {
				return &Damage{
					File:        name,
					Offset:      int64(stop),
					What:        fmt.Sprintf("the entry's checksum fails and an intact entry follows at offset %d: Badger would cut the log there and drop %d bytes of acknowledged entries; a salvage loses only this entry's object", p, stop+last-end),
					Salvageable: true,
				}
			}
			return &Damage{
				File:        name,
				Offset:      int64(stop),
				What:        fmt.Sprintf("a damaged entry with an intact entry at offset %d after it: Badger would cut the log at %d and drop %d bytes of acknowledged entries", p, end, stop+last-end),
				Salvageable: true,
			}
		}
	}
	return nil
}

var zeroBlock [64 << 10]byte

// nonZeroLen is the length of b without its trailing zeros. Logs are
// mapped at twice their size and mostly zero: compare in blocks.
func nonZeroLen(b []byte) int {
	n := len(b)
	for n >= len(zeroBlock) && bytes.Equal(b[n-len(zeroBlock):n], zeroBlock[:]) {
		n -= len(zeroBlock)
	}
	for n > 0 && b[n-1] == 0 {
		n--
	}
	return n
}

// readMapped maps path read-only; the returned func unmaps it.
func readMapped(path string) ([]byte, func(), error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if fi.Size() == 0 {
		return nil, func() {}, nil
	}
	b, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, nil, err
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}

// repairable says whether the damaged entry at off has an intact header
// whose lengths end it exactly at next, the intact entry after it: then
// only its key, value or checksum is damaged, and rewriting its checksum
// lets the replay go on. Its object is then read back as corrupt (cas
// verifies every chunk's hash), or missing if its key was hit.
func repairable(b []byte, off, next int) bool {
	p := off + 2
	var lens [3]uint64
	for i := range lens {
		if p >= next {
			return false
		}
		v, k := binary.Uvarint(b[p:next])
		if k <= 0 {
			return false
		}
		lens[i], p = v, p+k
	}
	return lens[0] > 0 && uint64(next-p) == lens[0]+lens[1]+4
}

// salvageLog rewrites, in the log at path, the checksum of every damaged
// entry that repairable allows, so that Badger's replay keeps the entries
// after it. It returns how many it rewrote; damage it cannot repair is
// left for Badger to cut.
func salvageLog(path string) (int, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	fixed := 0
	for {
		_, stop := replayEnd(b)
		last := nonZeroLen(b[stop:])
		next := -1
		for p := stop + 1; p < stop+last; p++ {
			if b[p]&0x30 == 0 {
				if _, ok := parseLogEntry(b, p); ok {
					next = p
					break
				}
			}
		}
		if next < 0 || !repairable(b, stop, next) {
			break
		}
		var crc [4]byte
		binary.BigEndian.PutUint32(crc[:], crc32.Checksum(b[stop:next-4], castagnoli))
		copy(b[next-4:], crc[:])
		if _, err := f.WriteAt(crc[:], int64(next-4)); err != nil {
			return fixed, err
		}
		fixed++
	}
	if fixed > 0 {
		if err := f.Sync(); err != nil {
			return fixed, err
		}
	}
	return fixed, nil
}

// CheckFiles reads the store's files for damage that Badger would not
// report (see above). A missing directory has no damage.
func CheckFiles(dir string) ([]Damage, error) {
	names, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cas: check store files: %w", err)
	}
	var logs, tables []string
	newestVlog, newestFid := "", -1
	for _, de := range names {
		name := de.Name()
		switch {
		case strings.HasSuffix(name, ".mem"):
			logs = append(logs, name)
		case strings.HasSuffix(name, ".vlog"):
			// Badger replays only the newest value log; damage in older
			// ones is met at the read, whose checksum fails.
			if fid, err := strconv.Atoi(strings.TrimSuffix(name, ".vlog")); err == nil && fid > newestFid {
				newestVlog, newestFid = name, fid
			}
		case strings.HasSuffix(name, ".sst"):
			tables = append(tables, name)
		}
	}
	if newestVlog != "" {
		logs = append(logs, newestVlog)
	}
	sort.Strings(logs)
	sort.Strings(tables)
	var found []Damage
	for _, name := range logs {
		b, unmap, err := readMapped(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("cas: check store files: %w", err)
		}
		d := checkLog(name, b)
		unmap()
		if d != nil {
			found = append(found, *d)
		}
	}
	for _, name := range tables {
		if d := checkTable(dir, name); d != nil {
			found = append(found, *d)
		}
	}
	return found, nil
}

// checkTable opens a table with Badger's reader and verifies every block's
// checksum. The reader panics on some damage (a truncated file); the
// panic is recovered here, in the caller's goroutine.
func checkTable(dir, name string) (d *Damage) {
	damaged := func(format string, args ...any) *Damage {
		return &Damage{File: name, Offset: -1, What: fmt.Sprintf(format, args...)}
	}
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return damaged("cannot open: %v", err)
	}
	defer f.Close()
	data, err := os.ReadFile(f.Name())
	if err != nil {
		return damaged("cannot read: %v", err)
	}
	defer func() {
		if r := recover(); r != nil {
			msg := strings.Join(strings.Fields(fmt.Sprint(r)), " ")
			if len(msg) > 300 {
				msg = msg[:300] + "…"
			}
			d = damaged("Badger's table reader panics on it: %s", msg)
		}
	}()
	// A table read from a copy in memory: the reader neither maps nor
	// changes the file (Close and DecrRef would delete it; neither is
	// called).
	_, err = table.OpenTable(&z.MmapFile{Data: data, Fd: f}, table.Options{
		ChkMode:     options.OnTableRead,
		Compression: options.None,
		BlockSize:   4 << 10,
	})
	if err != nil {
		return damaged("%v", err)
	}
	return nil
}

// damagedError reports what CheckFiles found.
func damagedError(dir string, found []Damage) error {
	var b strings.Builder
	for _, d := range found {
		b.WriteString("\n  ")
		b.WriteString(d.String())
	}
	return fmt.Errorf("%w in %s (left as they are):%s", ErrDamaged, dir, b.String())
}

func salvageable(found []Damage) bool {
	for _, d := range found {
		if !d.Salvageable {
			return false
		}
	}
	return true
}

// preserveDamaged copies every damaged file into dir/damaged-<time>/
// before Badger cuts it, so that the original bytes are kept.
func preserveDamaged(dir string, found []Damage) (string, error) {
	keep := filepath.Join(dir, "damaged-"+time.Now().UTC().Format("20060102T150405Z"))
	if err := os.MkdirAll(keep, 0o700); err != nil {
		return "", err
	}
	for _, d := range found {
		b, err := os.ReadFile(filepath.Join(dir, d.File))
		if err != nil {
			return "", err
		}
		if err := atomicfile.WriteFile(filepath.Join(keep, d.File), b, 0o600); err != nil {
			return "", err
		}
	}
	return keep, nil
}
