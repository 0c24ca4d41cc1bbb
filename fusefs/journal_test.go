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

	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/manifest"
)

// journalTestRecords has a record of every kind.
func journalTestRecords() []journalRecord {
	return []journalRecord{
		{kind: recBind, id: 2, path: "a/b"},
		{kind: recWrite, id: 2, off: 0, size: 5, mtime: 1_700_000_000_123456789, ctime: 1_700_000_001_000000001, ver: 3, data: []byte("hello")},
		{kind: recCreate, id: 3, dir: 1, name: "c", nkind: manifest.KindFile},
		{kind: recCreate, id: 4, dir: 1, name: "l", nkind: manifest.KindSymlink, data: []byte("../x")},
		{kind: recCreate, id: 5, dir: 1, name: "d", nkind: manifest.KindCharDev, rdev: 0x103},
		{kind: recCreate, id: 6, nkind: manifest.KindFile},
		{kind: recWrite, id: 3, off: 1 << 20, size: 1<<20 + 3, ver: 1, data: []byte("xyz")},
		{kind: recLink, id: 3, dir: 1, name: "c2"},
		{kind: recUnlink, dir: 1, name: "c2"},
		{kind: recUnlink, dir: 1, name: "e", flags: 1},
		{kind: recRename, dir: 1, name: "c", dir2: 2, name2: "c3", flags: RenameNoReplace},
		{kind: recTrunc, id: 3, size: 7},
		{kind: recAlloc, id: 3, off: 4096, size: 8192, flags: fallocKeepSize},
		{kind: recAttr, id: 3, ver: 9, attr: &attrSnap{mode: 0o4755, uid: 1000, gid: 1000, atime: 1, mtime: 2, ctime: 3, btime: 4,
			xattrs: map[string][]byte{"user.a": []byte("1"), "user.b": {}}}},
		{kind: recAttr, id: 1, ver: 1, attr: &attrSnap{mode: 0o755}},
		{kind: recLive, id: 6, data: []byte("7-12")},
		{kind: recUnlive, id: 6},
		{kind: recLive, id: 6, data: []byte("mx3-13")},
		{kind: recDetach, id: 6},
		{kind: recNext, ver: 43, size: 2},
		{kind: recStage, id: 3, size: 10, data: []byte("12-345678")},
	}
}

func TestJournalRecords(t *testing.T) {
	recs := journalTestRecords()
	const nonce = 0x5eed
	full := encodeJournalHeader(42, nonce)
	for i := range recs {
		full = recs[i].appendTo(full, nonce)
	}
	gen, got, err := readJournal(bytes.NewReader(full))
	require.NoError(t, err)
	require.Equal(t, uint64(42), gen)
	require.Len(t, got, len(recs))
	for i := range recs {
		if len(recs[i].data) == 0 {
			got[i].data = recs[i].data // nil and empty alike
		}
		require.Equal(t, recs[i], got[i], "record %d", i)
	}
	// A torn or damaged tail ends the records; what precedes it stays.
	for cut := len(full) - 1; cut >= journalHeaderLen; cut -= 7 {
		_, got, err := readJournal(bytes.NewReader(full[:cut]))
		require.NoError(t, err)
		require.Less(t, len(got), len(recs))
	}
	bad := bytes.Clone(full)
	bad[len(bad)-1] ^= 0xff
	_, got, err = readJournal(bytes.NewReader(bad))
	require.NoError(t, err)
	require.Len(t, got, len(recs)-1)
	_, _, err = readJournal(bytes.NewReader([]byte("nope")))
	require.Error(t, err)

	// Damage in the middle, with intact records of this incarnation after
	// it, is not a torn tail: it is reported with what precedes it.
	second := len(encodeJournalHeader(42, nonce)) + len(recs[0].appendTo(nil, nonce))
	for _, at := range []int{second, second + 9, second + 20} { // length, nonce, body
		bad = bytes.Clone(full)
		bad[at] ^= 0x10
		_, got, err = readJournal(bytes.NewReader(append(bad, make([]byte, 4096)...)))
		require.ErrorIs(t, err, ErrJournalDamaged, "flip at %d", at)
		var de *JournalDamageError
		require.ErrorAs(t, err, &de)
		require.Equal(t, int64(second), de.Offset)
		require.Equal(t, len(recs)-2, de.Records)
		require.Equal(t, int64(len(full)-second), de.Bytes)
		require.Len(t, got, 1)
	}

	// Zeros (the preallocated rest of the file) and records of an earlier
	// incarnation end the list too.
	_, got, err = readJournal(bytes.NewReader(append(bytes.Clone(full), make([]byte, 4096)...)))
	require.NoError(t, err)
	require.Len(t, got, len(recs))
	reset := encodeJournalHeader(43, nonce+1)
	reset = recs[0].appendTo(reset, nonce+1)
	reset = append(reset, full[len(reset):]...) // the old records after it
	gen, got, err = readJournal(bytes.NewReader(reset))
	require.NoError(t, err)
	require.Equal(t, uint64(43), gen)
	require.Len(t, got, 1)
}

// TestJournalBadRecords: a record whose fields a replay could not apply
// (a name that is no name, a path out of the tree, a size out of range,
// an unknown kind) ends the records as a torn one does.
func TestJournalBadRecords(t *testing.T) {
	const nonce = 5
	for i, rec := range []journalRecord{
		{kind: recStage, id: 2, size: 10, data: []byte("../x")},
		{kind: recStage, id: 2, size: 10, data: []byte("")},
		{kind: recStage, id: 2, size: -1, data: []byte("a")},
		{kind: recBind, id: 2, path: "/etc"},
		{kind: recBind, id: 2, path: "a/../b"},
		{kind: recBind, id: rootJID, path: "a"},
		{kind: recCreate, id: 3, dir: 1, name: "a/b", nkind: manifest.KindFile},
		{kind: recCreate, id: 3, dir: 1, name: "..", nkind: manifest.KindFile},
		{kind: recCreate, id: 3, dir: 0, name: "a", nkind: manifest.KindFile},
		{kind: recCreate, id: 3, dir: 1, name: "a", nkind: 99},
		{kind: recLink, id: 3, dir: 1, name: ""},
		{kind: recUnlink, dir: 0, name: "a"},
		{kind: recUnlink, dir: 1, name: "a", flags: 2},
		{kind: recRename, dir: 1, name: "a", dir2: 1, name2: "b\x00"},
		{kind: recWrite, id: 0, off: 0, size: 1, data: []byte("x")},
		{kind: recWrite, id: 2, off: -5, size: 1, data: []byte("x")},
		{kind: recWrite, id: 2, off: maxFileSize, size: 1, data: []byte("x")},
		{kind: recTrunc, id: 2, size: maxFileSize + 1},
		{kind: recAlloc, id: 2, off: 0, size: 0},
		{kind: recAttr, id: 2, attr: &attrSnap{mode: 0o170000}},
		{kind: recLive, id: 2, data: []byte("../x")},
		{kind: recLive, id: 0, data: []byte("x")},
		{kind: recUnlive, id: 2, data: []byte("x")},
		{kind: recDetach, id: 2, data: []byte("x")},
		{kind: recDetach, id: 0},
		{kind: recNext, ver: 0, size: 1},
		{kind: recNext, ver: 3, size: 1, data: []byte("x")},
		{kind: 0, id: 2},
		{kind: 200, id: 2},
	} {
		_, got, err := readJournal(bytes.NewReader(rec.appendTo(encodeJournalHeader(1, nonce), nonce)))
		require.NoError(t, err)
		require.Empty(t, got, "record %d: %+v", i, rec)
	}
}

// v3Record encodes r as the HFJ3 format did (a write or stage record named
// by path), for tests that replay a journal of an earlier daemon.
func v3Record(r journalRecord, nonce uint64) []byte {
	payload := binary.LittleEndian.AppendUint64(nil, nonce)
	payload = binary.AppendUvarint(payload, uint64(len(r.path)))
	payload = append(payload, r.path...)
	payload = binary.LittleEndian.AppendUint64(payload, uint64(r.off))
	payload = binary.LittleEndian.AppendUint64(payload, uint64(r.size))
	payload = binary.LittleEndian.AppendUint64(payload, uint64(r.mtime))
	payload = binary.LittleEndian.AppendUint64(payload, uint64(r.ctime))
	payload = append(payload, r.data...)
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(payload)))
	out = binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(payload))
	return append(out, payload...)
}

// v3Header is an HFJ3 journal's header.
func v3Header(gen, nonce uint64) []byte {
	hdr := encodeJournalHeader(gen, nonce)
	copy(hdr, journalMagicV3)
	return binary.LittleEndian.AppendUint32(hdr[:len(hdr)-4], crc32.ChecksumIEEE(hdr[:len(hdr)-4]))
}

// TestJournalV3 reads a journal of the HFJ3 format: writes and stage
// records named by path.
func TestJournalV3(t *testing.T) {
	const nonce = 5
	recs := []journalRecord{
		{kind: recWrite, path: "a/b", off: 3, size: 8, mtime: 7, ctime: 8, data: []byte("hello")},
		{kind: recStage, path: "w/out", off: stageOff, size: 10, data: []byte("12-345678")},
	}
	old := v3Header(4, nonce)
	for _, r := range recs {
		old = append(old, v3Record(r, nonce)...)
	}
	gen, got, err := readJournal(bytes.NewReader(old))
	require.NoError(t, err)
	require.Equal(t, uint64(4), gen)
	require.Equal(t, recs, got)
	for name, ok := range map[string]bool{
		"": false, ".": false, "..": false, "../x": false, "a/b": false,
		"a\x00b": false, strings.Repeat("x", 256): false, strings.Repeat("x", 255): true,
	} {
		rec := journalRecord{path: "w/out", off: stageOff, size: 10, data: []byte(name)}
		_, got, err := readJournal(bytes.NewReader(append(v3Header(1, nonce), v3Record(rec, nonce)...)))
		require.NoError(t, err)
		require.Equal(t, ok, len(got) == 1, "name %q", name)
	}
	// Other negative offsets are not records.
	rec := journalRecord{path: "w/out", off: -2, size: 10}
	_, got, err = readJournal(bytes.NewReader(append(v3Header(1, nonce), v3Record(rec, nonce)...)))
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestJournalReuse(t *testing.T) {
	j, read := testJournal(t)
	require.NoError(t, j.reset(1))
	big := journalRecord{kind: recWrite, id: 2, off: 0, size: 3 << 20, data: bytes.Repeat([]byte("x"), 3<<20)}
	for range 3 {
		require.NoError(t, j.append([]journalRecord{big}))
	}
	_, recs := read()
	require.Len(t, recs, 3)
	st, err := os.Stat(j.path)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Size(), int64(9<<20), "preallocated past the records")

	require.NoError(t, j.reset(2))
	require.NoError(t, j.append([]journalRecord{{kind: recWrite, id: 3, off: 1, size: 2, data: []byte("y")}}))
	gen, recs := read()
	require.Equal(t, uint64(2), gen)
	require.Len(t, recs, 1)
	require.Equal(t, uint64(3), recs[0].id)
	st, err = os.Stat(j.path)
	require.NoError(t, err)
	require.Equal(t, int64(journalGrow), st.Size(), "a reset gives back what a burst grew")

	// A record that would pass the bound is refused, and nothing is lost.
	huge := journalRecord{kind: recWrite, id: 4, size: journalMaxBytes, data: make([]byte, journalMaxBytes)}
	require.ErrorIs(t, j.append([]journalRecord{huge}), errJournalFull)
	_, recs = read()
	require.Len(t, recs, 1)
}

// TestJournalSyncedWrites: records go through the mapping until the
// journal is synced, then by pwrite for journalMapAfter bytes, then
// through the mapping again; a replay reads every one, in order,
// whichever way it went in.
func TestJournalSyncedWrites(t *testing.T) {
	j, read := testJournal(t)
	require.NoError(t, j.reset(1))
	if j.mem == nil {
		t.Skip("the journal file cannot be mapped here")
	}
	line := bytes.Repeat([]byte("l"), 600)
	var want []journalRecord
	put := func(n int) {
		for range n {
			r := journalRecord{kind: recWrite, id: 2, off: int64(len(want) * len(line)), size: int64((len(want) + 1) * len(line)), ver: uint64(len(want) + 1), data: line}
			require.NoError(t, j.write(r))
			want = append(want, r)
		}
	}
	via := func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		return j.viaMapping()
	}
	require.True(t, via(), "never synced: the mapping")
	put(10)
	require.NoError(t, j.sync())
	require.False(t, via(), "just synced: pwrite")
	put(32)
	require.NoError(t, j.sync())
	put(journalMapAfter/len(line) + 1)
	require.True(t, via(), "journalMapAfter bytes since the sync: the mapping again")
	put(3)
	require.NoError(t, j.append([]journalRecord{}))
	require.False(t, via(), "synced by append: pwrite")
	put(3)

	_, got := read()
	require.Len(t, got, len(want))
	for i := range want {
		require.Equal(t, want[i], got[i], "record %d", i)
	}
}

// TestJournalV1 replays a journal written by earlier daemons.
func TestJournalV1(t *testing.T) {
	r := journalRecord{kind: recWrite, path: "a/b", off: 3, size: 8, data: []byte("hello")}
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
		{kind: recWrite, path: "a/b", off: 3, size: 8, data: []byte("hello")},
		{kind: recWrite, path: "c", off: 0, size: 2, data: []byte("hi")},
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

	store, err := badgerstore.Open(storeDir, badgerstore.Options{})
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

// FuzzReadJournal: any bytes give an error or whole records that pass
// their checks, and re-encoding those of the current format reads back
// the same.
func FuzzReadJournal(f *testing.F) {
	all := encodeJournalHeader(0, 9)
	for _, r := range journalTestRecords() {
		all = r.appendTo(all, 9)
	}
	f.Add(all)
	f.Add(append(encodeJournalHeader(1, 2), "garbage"...))
	f.Add([]byte(journalMagicV1 + "\x01\x00\x00\x00\x00\x00\x00\x00garbage"))
	st := journalRecord{path: "workspace/out.bin", off: stageOff, size: 1 << 30, data: []byte("17-123456")}
	f.Add(append(v3Header(3, 4), v3Record(st, 4)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		gen, recs, err := readJournal(bytes.NewReader(data))
		if err != nil {
			return
		}
		_, format, _, _ := journalHeader(data)
		const nonce = 77
		again := encodeJournalHeader(gen, nonce)
		for i := range recs {
			if recs[i].kind == recStage {
				if name := string(recs[i].data); recs[i].size > maxFileSize || name == "" || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
					t.Fatalf("stage record names no staging file: %+v", recs[i])
				}
			} else if recs[i].off < 0 || recs[i].size < 0 || recs[i].off+int64(len(recs[i].data)) > maxFileSize {
				t.Fatalf("record out of bounds: %+v", recs[i])
			}
			if format.v4 && !recs[i].valid() {
				t.Fatalf("invalid record read: %+v", recs[i])
			}
			again = recs[i].appendTo(again, nonce)
		}
		if !format.v4 {
			return
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
	rec := journalRecord{kind: recWrite, id: 2, size: 1 << 20, data: line}
	b.SetBytes(int64(len(line)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec.off = int64(i) * int64(len(line))
		err := j.write(rec)
		if errors.Is(err, errJournalFull) {
			require.NoError(b, j.reset(1))
			err = j.write(rec)
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

// TestForHead: a journal's next blocks (journalNext) are skipped by a
// replay onto its own head, and onto the head one flush later only the
// last block made for that head applies.
func TestForHead(t *testing.T) {
	w := func(id uint64) journalRecord {
		return journalRecord{kind: recWrite, id: id, size: 1, data: []byte("x")}
	}
	next := func(gen uint64, n int64) journalRecord { return journalRecord{kind: recNext, ver: gen, size: n} }
	recs := []journalRecord{w(2), next(8, 2), w(10), w(11), w(3), next(8, 1), w(12), w(4)}
	ids := func(rs []journalRecord) []uint64 {
		var out []uint64
		for _, r := range rs {
			out = append(out, r.id)
		}
		return out
	}
	require.Equal(t, []uint64{2, 3, 4}, ids(forHead(recs, 7, 7)), "its own head: every record but the blocks")
	require.Equal(t, []uint64{12}, ids(forHead(recs, 7, 8)), "the next head: the last block for it")
	require.Empty(t, forHead(recs[:1], 7, 8), "no block: nothing")
	require.Equal(t, []uint64{10}, ids(forHead(recs[:3], 7, 8)), "a block cut short by the journal's end")
	// A block whose commit failed, then a move with no live file: its
	// empty block is the one that counts.
	failed := []journalRecord{w(2), next(8, 2), w(10), w(11), w(3), next(8, 0), w(4)}
	require.Empty(t, forHead(failed, 7, 8), "the last block for the head, empty")
	require.Equal(t, []uint64{2, 3, 4}, ids(forHead(failed, 7, 7)))
}
