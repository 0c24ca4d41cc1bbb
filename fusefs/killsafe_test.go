package fusefs

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/catalog"
)

// A kill -9 of the daemon loses no write it acknowledged, fsynced or not
// (journal.go, logWrite), as a process crash on ext4 loses nothing. The
// daemons of these tests never flush by themselves, so whatever survives
// the kill came through the journal.

// TestKillKeepsUnsyncedWrites: Codex's rollout appends (O_RDWR|O_APPEND)
// and SQLite-like page writes into files the durable head has, never
// fsynced, with the descriptors still open at the kill.
func TestKillKeepsUnsyncedWrites(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	first := []byte(`{"type":"session_meta"}` + "\n")
	db := randBytes(41, 256<<10)
	require.NoError(t, writeSync(d.mnt, "sessions/rollout.jsonl", first))
	require.NoError(t, writeSync(d.mnt, "db", db))
	require.NoError(t, syncDir(d.mnt))

	rollout, err := os.OpenFile(filepath.Join(d.mnt, "sessions/rollout.jsonl"), os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	defer rollout.Close()
	want := bytes.Clone(first)
	lines, _ := jsonLines(2000)
	for _, line := range lines {
		_, err := rollout.Write(line)
		require.NoError(t, err)
		want = append(want, line...)
	}
	big := randBytes(42, 3<<20+5) // several WRITE requests
	_, err = rollout.Write(big)
	require.NoError(t, err)
	want = append(want, big...)

	pages, err := os.OpenFile(filepath.Join(d.mnt, "db"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer pages.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	for i := range 500 {
		off := rng.IntN(len(db)/4096) * 4096
		page := randBytes(uint64(100+i), 4096)
		_, err := pages.WriteAt(page, int64(off))
		require.NoError(t, err)
		copy(db[off:], page)
	}
	grown := randBytes(43, 10000) // past the end
	_, err = pages.WriteAt(grown, int64(len(db)+3000))
	require.NoError(t, err)
	db = append(append(db, make([]byte, 3000)...), grown...)

	d.kill(t)
	m := d.remount(t)
	got, err := os.ReadFile(filepath.Join(m.Dir(), "sessions/rollout.jsonl"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "rollout: %d bytes, want %d", len(got), len(want))
	got, err = os.ReadFile(filepath.Join(m.Dir(), "db"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(db, got), "db: %d bytes, want %d", len(got), len(db))
}

// TestKillDuringUnsyncedAppends kills the daemon while an appender that
// never fsyncs is writing: every append that returned is there after the
// restart, and nothing but the one in flight besides.
func TestKillDuringUnsyncedAppends(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	require.NoError(t, writeSync(d.mnt, "rollout.jsonl", nil))
	lines, _ := jsonLines(4096)
	var stream []byte
	for _, line := range lines {
		stream = append(stream, line...)
	}

	f, err := os.OpenFile(filepath.Join(d.mnt, "rollout.jsonl"), os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	defer f.Close()
	started := make(chan struct{})
	acked := make(chan int)
	go func() {
		n := 0
		for i := 0; ; i++ {
			if i == 300 {
				close(started)
			}
			if _, err := f.Write(lines[i%len(lines)]); err != nil {
				acked <- n
				return
			}
			n++
		}
	}()
	<-started
	d.kill(t)
	n := <-acked
	require.Less(t, n, len(lines), "the appender outran the pool of lines")
	ackedBytes := 0
	for _, line := range lines[:n] {
		ackedBytes += len(line)
	}

	m := d.remount(t)
	got, err := os.ReadFile(filepath.Join(m.Dir(), "rollout.jsonl"))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(got), ackedBytes, "%d of %d appends returned", n, len(lines))
	require.LessOrEqual(t, len(got), ackedBytes+len(lines[n]), "only the append in flight may be there besides")
	require.True(t, bytes.Equal(stream[:len(got)], got), "the file is the appends in order")
}

// TestKillAfterJournalFilled: served writes past what the journal holds
// (journalMaxBytes) make the write that does not fit flush the session
// (which empties the journal) before it returns, so nothing is lost either.
func TestKillAfterJournalFilled(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	require.NoError(t, writeSync(d.mnt, "big", []byte("start")))
	f, err := os.OpenFile(filepath.Join(d.mnt, "big"), os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	const block = 1 << 20
	n := journalMaxBytes/block + 16
	want := make([]byte, 0, n*block)
	for i := range n {
		p := randBytes(uint64(500+i), block)
		_, err := f.WriteAt(p, int64(i*block))
		require.NoError(t, err)
		want = append(want, p...)
	}
	d.kill(t)
	m := d.remount(t)
	got, err := os.ReadFile(filepath.Join(m.Dir(), "big"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "big: %d bytes, want %d", len(got), len(want))
}

// journalFrames returns the offsets of the intact write records of the
// journal file at path.
func journalFrames(t *testing.T, path string) (uint64, []int) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	nonce := binary.LittleEndian.Uint64(b[len(journalMagic)+8:])
	var offs []int
	for off := journalHeaderLen; ; {
		rec, end, st := readFrame(b, off, recordFormat{nonce: nonce, times: true, v4: true})
		if st != frameRecord {
			return binary.LittleEndian.Uint64(b[len(journalMagic):]), offs
		}
		if rec.kind == recWrite {
			offs = append(offs, off)
		}
		off = end
	}
}

// TestKillDamagedJournal: a byte flipped in a middle record of the journal
// a killed daemon left (unsynced appends) makes the session refuse to load
// with ErrJournalDamaged, naming the offset and what would be lost, and
// leaves the journal as it was with a copy beside it; with
// SalvageJournals the records before the damage are replayed.
// killWithDamagedJournal kills a daemon whose journal holds ten
// unsynced appends to a file, then flips a byte in the fifth record. It
// returns the journal's path, its bytes before and after, the records'
// offsets and the lines appended.
func killWithDamagedJournal(t *testing.T) (d *durableDaemon, jpath string, orig, damaged []byte, offs []int, lines [][]byte) {
	t.Helper()
	d = startDurable(t)
	require.NoError(t, writeSync(d.mnt, "log", []byte("head\n")))
	require.NoError(t, syncDir(d.mnt))
	f, err := os.OpenFile(filepath.Join(d.mnt, "log"), os.O_RDWR|os.O_APPEND, 0)
	require.NoError(t, err)
	defer f.Close()
	for i := range 10 {
		line := []byte(fmt.Sprintf("line %d of the rollout\n", i))
		_, err := f.Write(line)
		require.NoError(t, err)
		lines = append(lines, line)
	}
	d.kill(t)

	jpath = journalPath(d.storeDir, "d")
	_, offs = journalFrames(t, jpath)
	require.Len(t, offs, 10, "one write record per append")
	orig, err = os.ReadFile(jpath)
	require.NoError(t, err)
	damaged = bytes.Clone(orig)
	damaged[offs[4]+20] ^= 0x40 // inside the fifth record
	require.NoError(t, os.WriteFile(jpath, damaged, 0o600))
	return d, jpath, orig, damaged, offs, lines
}

// TestRebootTornJournal: a journal written before the host's last boot,
// with a bad record before good ones, is the tail of unsynced records a
// power loss wrote back out of order, which nothing promised to keep: it
// is replayed up to the bad record, a copy kept, and the session mounts.
// Within one boot (TestKillDamagedJournal) the same journal is refused.
func TestRebootTornJournal(t *testing.T) {
	t.Parallel()
	d, jpath, _, damaged, _, lines := killWithDamagedJournal(t)
	// The header as an earlier boot wrote it: another boot id.
	boot := len(journalMagic) + 16
	for i := range bootIDLen {
		damaged[boot+i] ^= 0xff
	}
	binary.LittleEndian.PutUint32(damaged[journalHeaderLen-4:], crc32.ChecksumIEEE(damaged[:journalHeaderLen-4]))
	require.NoError(t, os.WriteFile(jpath, damaged, 0o600))
	require.True(t, rebooted([bootIDLen]byte(damaged[boot:boot+bootIDLen])))

	store, err := badgerstore.Open(d.storeDir, badgerstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	e := New(store, catalog.New(store), Options{StoreDir: d.storeDir, FlushInterval: -1})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	m := MountForTest(t, e, "d", "", MountOptions{})
	got, err := os.ReadFile(filepath.Join(m.Dir(), "log"))
	require.NoError(t, err)
	require.Equal(t, "head\n"+string(bytes.Join(lines[:4], nil)), string(got))
	copies, err := filepath.Glob(jpath + ".damaged-*")
	require.NoError(t, err)
	require.Len(t, copies, 1, "a copy of the journal is kept")
}

func TestKillDamagedJournal(t *testing.T) {
	t.Parallel()
	d, jpath, orig, damaged, offs, lines := killWithDamagedJournal(t)

	store, err := badgerstore.Open(d.storeDir, badgerstore.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, store.Close()) })
	e := New(store, catalog.New(store), Options{StoreDir: d.storeDir, FlushInterval: -1})
	_, err = e.Mount(context.Background(), "d", "", t.TempDir(), MountOptions{})
	require.ErrorIs(t, err, ErrJournalDamaged)
	var de *JournalDamageError
	require.ErrorAs(t, err, &de)
	require.Equal(t, int64(offs[4]), de.Offset)
	require.Equal(t, 5, de.Records, "the five records after the damaged one")
	require.Equal(t, int64(len(orig)), int64(len(damaged)))
	require.Contains(t, err.Error(), jpath)
	require.Contains(t, err.Error(), "--salvage")
	got, err := os.ReadFile(jpath)
	require.NoError(t, err)
	require.True(t, bytes.Equal(damaged, got), "the journal is left as it was")
	cp, err := os.ReadFile(de.Copy)
	require.NoError(t, err)
	require.True(t, bytes.Equal(damaged, cp), "a copy is kept")
	require.NoError(t, e.Close(context.Background()))

	// Salvage: the records before the damage, and nothing after it.
	e = New(store, catalog.New(store), Options{StoreDir: d.storeDir, FlushInterval: -1, SalvageJournals: true})
	t.Cleanup(func() { require.NoError(t, e.Close(context.Background())) })
	m := MountForTest(t, e, "d", "", MountOptions{})
	got, err = os.ReadFile(filepath.Join(m.Dir(), "log"))
	require.NoError(t, err)
	require.Equal(t, "head\n"+string(bytes.Join(lines[:4], nil)), string(got))
}

// TestKillKeepsWriteTimes: a file written after the durable head (no
// fsync) comes back from the journal after a kill -9 with the mtime and
// ctime stat showed before the kill, not the head's.
func TestKillKeepsWriteTimes(t *testing.T) {
	t.Parallel()
	d := startDurable(t)
	p := filepath.Join(d.mnt, "db")
	require.NoError(t, writeSync(d.mnt, "db", randBytes(51, 64<<10)))
	old := time.Date(2001, 2, 3, 4, 5, 6, 7, time.UTC)
	require.NoError(t, os.Chtimes(p, old, old))
	require.NoError(t, syncDir(d.mnt)) // a full flush: the head has the old mtime

	f, err := os.OpenFile(p, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	_, err = f.WriteAt(randBytes(52, 4096), 8192)
	require.NoError(t, err)
	var before unix.Stat_t
	require.NoError(t, unix.Fstat(int(f.Fd()), &before))
	require.NotEqual(t, old.Unix(), before.Mtim.Sec, "the write moved the mtime")

	d.kill(t)
	m := d.remount(t)
	var after unix.Stat_t
	require.NoError(t, unix.Stat(filepath.Join(m.Dir(), "db"), &after))
	require.Equal(t, before.Mtim, after.Mtim, "mtime")
	require.Equal(t, before.Ctim, after.Ctim, "ctime")
}
