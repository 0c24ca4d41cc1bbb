package fusefs

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
)

func TestJournalRecords(t *testing.T) {
	recs := []journalRecord{
		{path: "a/b", off: 0, size: 5, mtime: 1_700_000_000_123456789, ctime: 1_700_000_001_000000001, data: []byte("hello")},
		{path: "c", off: 1 << 20, size: 1<<20 + 3, data: []byte("xyz")},
		{path: "c", off: 7, size: 1<<20 + 3},
	}
	const nonce = 0x5eed
	full := encodeJournalHeader(42, nonce)
	for i := range recs {
		full = recs[i].appendTo(full, nonce)
	}
	gen, got, err := readJournal(bytes.NewReader(full))
	require.NoError(t, err)
	require.Equal(t, uint64(42), gen)
	require.Len(t, got, 3)
	for i := range recs {
		require.Equal(t, recs[i].path, got[i].path)
		require.Equal(t, recs[i].off, got[i].off)
		require.Equal(t, recs[i].size, got[i].size)
		require.Equal(t, recs[i].mtime, got[i].mtime)
		require.Equal(t, recs[i].ctime, got[i].ctime)
		require.Equal(t, len(recs[i].data), len(got[i].data))
	}
	// A torn or damaged tail ends the records; what precedes it stays.
	for cut := len(full) - 1; cut >= journalHeaderLen; cut -= 7 {
		_, got, err := readJournal(bytes.NewReader(full[:cut]))
		require.NoError(t, err)
		require.Less(t, len(got), 3)
	}
	bad := bytes.Clone(full)
	bad[len(bad)-1] ^= 0xff
	_, got, err = readJournal(bytes.NewReader(bad))
	require.NoError(t, err)
	require.Len(t, got, 2)
	_, _, err = readJournal(bytes.NewReader([]byte("nope")))
	require.Error(t, err)

	// Damage in the middle, with an intact record of this incarnation after
	// it, is not a torn tail: it is reported with what precedes it.
	second := len(encodeJournalHeader(42, nonce)) + len(recs[0].appendTo(nil, nonce))
	for _, at := range []int{second, second + 9, second + 20} { // length, nonce, path
		bad = bytes.Clone(full)
		bad[at] ^= 0x10
		_, got, err = readJournal(bytes.NewReader(append(bad, make([]byte, 4096)...)))
		require.ErrorIs(t, err, ErrJournalDamaged, "flip at %d", at)
		var de *JournalDamageError
		require.ErrorAs(t, err, &de)
		require.Equal(t, int64(second), de.Offset)
		require.Equal(t, 1, de.Records)
		require.Equal(t, int64(len(full)-second), de.Bytes)
		require.Len(t, got, 1)
	}

	// Zeros (the preallocated rest of the file) and records of an earlier
	// incarnation end the list too.
	_, got, err = readJournal(bytes.NewReader(append(bytes.Clone(full), make([]byte, 4096)...)))
	require.NoError(t, err)
	require.Len(t, got, 3)
	reset := encodeJournalHeader(43, nonce+1)
	reset = recs[0].appendTo(reset, nonce+1)
	reset = append(reset, full[len(reset):]...) // the old records after it
	gen, got, err = readJournal(bytes.NewReader(reset))
	require.NoError(t, err)
	require.Equal(t, uint64(43), gen)
	require.Len(t, got, 1)
}

// TestJournalReuse: a reset journal is overwritten in place, and replays
// only the records written since the reset, however many were there before.
// TestJournalStageRecords: a stage record names one plain file of the
// backing directory; any other name ends the records.
func TestJournalStageRecords(t *testing.T) {
	const nonce = 5
	for name, ok := range map[string]bool{
		"12-345678": true, "": false, ".": false, "..": false, "../x": false, "a/b": false,
		"a\x00b": false, strings.Repeat("x", 256): false, strings.Repeat("x", 255): true,
	} {
		rec := journalRecord{path: "w/out", off: stageOff, size: 10, data: []byte(name)}
		_, got, err := readJournal(bytes.NewReader(rec.appendTo(encodeJournalHeader(1, nonce), nonce)))
		require.NoError(t, err)
		if !ok {
			require.Empty(t, got, "name %q", name)
			continue
		}
		require.Len(t, got, 1, "name %q", name)
		require.Equal(t, rec.path, got[0].path)
		require.Equal(t, int64(stageOff), got[0].off)
		require.Equal(t, int64(10), got[0].size)
		require.Equal(t, name, string(got[0].data))
	}
	// Other negative offsets are not records.
	rec := journalRecord{path: "w/out", off: -2, size: 10}
	_, got, err := readJournal(bytes.NewReader(rec.appendTo(encodeJournalHeader(1, nonce), nonce)))
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestJournalReuse(t *testing.T) {
	j, read := testJournal(t)
	require.NoError(t, j.reset(1))
	big := journalRecord{path: "a", off: 0, size: 3 << 20, data: bytes.Repeat([]byte("x"), 3<<20)}
	for range 3 {
		require.NoError(t, j.append([]journalRecord{big}))
	}
	_, recs := read()
	require.Len(t, recs, 3)
	st, err := os.Stat(j.path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Size(), int64(9<<20), "preallocated past the records")

	require.NoError(t, j.reset(2))
	require.NoError(t, j.append([]journalRecord{{path: "b", off: 1, size: 2, data: []byte("y")}}))
	gen, recs := read()
	require.Equal(t, uint64(2), gen)
	require.Len(t, recs, 1)
	require.Equal(t, "b", recs[0].path)
	st, err = os.Stat(j.path)
	require.NoError(t, err)
	require.Equal(t, int64(journalGrow), st.Size(), "a reset gives back what a burst grew")

	// A record that would pass the bound is refused, and nothing is lost.
	huge := journalRecord{path: "c", size: journalMaxBytes, data: make([]byte, journalMaxBytes)}
	require.ErrorIs(t, j.append([]journalRecord{huge}), errJournalFull)
	_, recs = read()
	require.Len(t, recs, 1)
}

// TestJournalV1 replays a journal written by earlier daemons.
func TestJournalV1(t *testing.T) {
	r := journalRecord{path: "a/b", off: 3, size: 8, data: []byte("hello")}
	payload := binary.AppendUvarint(nil, uint64(len(r.path)))
	payload = append(payload, r.path...)
	payload = binary.LittleEndian.AppendUint64(payload, uint64(r.off))
	payload = binary.LittleEndian.AppendUint64(payload, uint64(r.size))
	payload = append(payload, r.data...)
	old := append([]byte(journalMagicV1), 7, 0, 0, 0, 0, 0, 0, 0)
	old = binary.LittleEndian.AppendUint32(old, uint32(len(payload)))
	old = binary.LittleEndian.AppendUint32(old, crc32.ChecksumIEEE(payload))
	old = append(old, payload...)
	gen, recs, err := readJournal(bytes.NewReader(old))
	require.NoError(t, err)
	require.Equal(t, uint64(7), gen)
	require.Equal(t, []journalRecord{r}, recs)
}

// TestJournalV2 replays a journal of the HFJ2 format, whose records carry
// no times, and its damage is found as in the current format.
func TestJournalV2(t *testing.T) {
	const nonce = 0xabc
	recs := []journalRecord{
		{path: "a/b", off: 3, size: 8, data: []byte("hello")},
		{path: "c", off: 0, size: 2, data: []byte("hi")},
	}
	hdr := append([]byte(journalMagicV2), 9, 0, 0, 0, 0, 0, 0, 0)
	hdr = binary.LittleEndian.AppendUint64(hdr, nonce)
	old := binary.LittleEndian.AppendUint32(hdr, crc32.ChecksumIEEE(hdr))
	for _, r := range recs {
		payload := binary.LittleEndian.AppendUint64(nil, nonce)
		payload = binary.AppendUvarint(payload, uint64(len(r.path)))
		payload = append(payload, r.path...)
		payload = binary.LittleEndian.AppendUint64(payload, uint64(r.off))
		payload = binary.LittleEndian.AppendUint64(payload, uint64(r.size))
		payload = append(payload, r.data...)
		old = binary.LittleEndian.AppendUint32(old, uint32(len(payload)))
		old = binary.LittleEndian.AppendUint32(old, crc32.ChecksumIEEE(payload))
		old = append(old, payload...)
	}
	gen, got, err := readJournal(bytes.NewReader(append(bytes.Clone(old), make([]byte, 100)...)))
	require.NoError(t, err)
	require.Equal(t, uint64(9), gen)
	require.Equal(t, recs, got)

	old[journalHeaderLenV2+10] ^= 1 // the first record's path length
	_, got, err = readJournal(bytes.NewReader(old))
	require.ErrorIs(t, err, ErrJournalDamaged)
	require.Empty(t, got)
}

// TestJournalDurability: rewrites and appends to files the durable head
// already has are fsynced through the journal; after a kill -9 of the
// daemon they come back from it, and the journal is then folded into the
// head.
func TestJournalDurability(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	storeDir, mnt := d.storeDir, d.mnt

	db := randBytes(7, 256<<10)
	require.NoError(t, writeSync(mnt, "home/state.sqlite", db))
	rollout := []byte("{\"type\":\"session_meta\"}\n")
	require.NoError(t, writeSync(mnt, "home/rollout.jsonl", rollout))

	f, err := os.OpenFile(filepath.Join(mnt, "home/state.sqlite"), os.O_RDWR, 0)
	require.NoError(t, err)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 20; i++ {
		page := randBytes(uint64(100+i), 4096)
		off := int64(r.IntN(80)) * 4096 // some past the old end: the file grows
		_, err := f.WriteAt(page, off)
		require.NoError(t, err)
		if end := off + 4096; end > int64(len(db)) {
			db = append(db, make([]byte, end-int64(len(db)))...)
		}
		copy(db[off:], page)
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
	a, err := os.OpenFile(filepath.Join(mnt, "home/rollout.jsonl"), os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	for i := 0; i < 50; i++ {
		line := []byte("{\"type\":\"response_item\",\"n\":" + string(rune('0'+i%10)) + "}\n")
		_, err := a.Write(line)
		require.NoError(t, err)
		rollout = append(rollout, line...)
		if i%8 == 7 || i == 49 {
			require.NoError(t, syscall.Fdatasync(int(a.Fd())))
		}
	}
	require.NoError(t, a.Close())

	d.kill(t)

	store, err := cas.OpenBadger(storeDir, cas.BadgerOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	cat := catalog.New(store)
	head, err := cat.Head(context.Background(), "d")
	require.NoError(t, err)
	jf, err := os.Open(journalPath(storeDir, "d"))
	require.NoError(t, err)
	gen, recs, err := readJournal(jf)
	jf.Close()
	require.NoError(t, err)
	require.Equal(t, head.Gen, gen, "the journal belongs to the durable head")
	require.NotEmpty(t, recs, "the fsyncs went through the journal")

	e := New(store, cat, Options{StoreDir: storeDir, FlushInterval: -1})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	m := MountForTest(t, e, "d", "", MountOptions{})
	got, err := os.ReadFile(filepath.Join(m.Dir(), "home/state.sqlite"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(db, got), "state.sqlite: %d bytes, want %d", len(got), len(db))
	got, err = os.ReadFile(filepath.Join(m.Dir(), "home/rollout.jsonl"))
	require.NoError(t, err)
	require.Equal(t, string(rollout), string(got))

	// Replayed, then folded into the head: the journal is empty again.
	jf, err = os.Open(journalPath(storeDir, "d"))
	require.NoError(t, err)
	gen, recs, err = readJournal(jf)
	jf.Close()
	require.NoError(t, err)
	require.Empty(t, recs)
	require.Equal(t, mustHead(t, e, "d").Gen, gen)
	require.NoError(t, catalog.VerifyComplete(context.Background(), store, mustHead(t, e, "d").Root))
}

// FuzzReadJournal: any bytes give an error or whole records with valid
// paths and bounds, and re-encoding them reads back the same.
func FuzzReadJournal(f *testing.F) {
	r := journalRecord{path: "codex-home/state_5.sqlite", off: 4096, size: 8192, data: []byte("page")}
	f.Add(r.appendTo(encodeJournalHeader(0, 9), 9))
	f.Add(append(encodeJournalHeader(1, 2), "garbage"...))
	f.Add([]byte(journalMagicV1 + "\x01\x00\x00\x00\x00\x00\x00\x00garbage"))
	st := journalRecord{path: "workspace/out.bin", off: stageOff, size: 1 << 30, data: []byte("17-123456")}
	f.Add(st.appendTo(encodeJournalHeader(3, 4), 4))
	f.Fuzz(func(t *testing.T, data []byte) {
		gen, recs, err := readJournal(bytes.NewReader(data))
		if err != nil {
			return
		}
		const nonce = 77
		again := encodeJournalHeader(gen, nonce)
		for i := range recs {
			if recs[i].off == stageOff {
				if name := string(recs[i].data); recs[i].size > maxFileSize || name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
					t.Fatalf("stage record names no staging file: %+v", recs[i])
				}
			} else if recs[i].off < 0 || recs[i].size < 0 || recs[i].off+int64(len(recs[i].data)) > maxFileSize {
				t.Fatalf("record out of bounds: %+v", recs[i])
			}
			again = recs[i].appendTo(again, nonce)
		}
		gen2, recs2, err := readJournal(bytes.NewReader(again))
		if err != nil || gen2 != gen || len(recs2) != len(recs) {
			t.Fatalf("re-encoded journal reads back %d records, gen %d, %v; want %d, %d", len(recs2), gen2, err, len(recs), gen)
		}
	})
}

// BenchmarkJournalWrite: one op is logWrite's journal write of a rollout
// line's record (encode, copy into the shared mapping), without an fsync.
func BenchmarkJournalWrite(b *testing.B) {
	j, err := openJournal(b.TempDir(), "s")
	require.NoError(b, err)
	b.Cleanup(func() { j.close() })
	require.NoError(b, j.reset(1))
	line := bytes.Repeat([]byte("x"), 300)
	rec := journalRecord{path: "sessions/2026/rollout.jsonl", size: 1 << 20, data: line}
	b.SetBytes(int64(len(line)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec.off = int64(i) * int64(len(line))
		err := j.write(&rec)
		if errors.Is(err, errJournalFull) {
			require.NoError(b, j.reset(1))
			err = j.write(&rec)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// testJournal opens a journal in a temporary directory, closed when the
// test ends, and a function that reads its file back as a replay would.
func testJournal(t *testing.T) (*journal, func() (uint64, []journalRecord)) {
	t.Helper()
	j, err := openJournal(t.TempDir(), "s")
	require.NoError(t, err)
	t.Cleanup(func() { j.close() })
	return j, func() (uint64, []journalRecord) {
		f, err := os.Open(j.path)
		require.NoError(t, err)
		defer f.Close()
		gen, recs, err := readJournal(f)
		require.NoError(t, err)
		return gen, recs
	}
}
