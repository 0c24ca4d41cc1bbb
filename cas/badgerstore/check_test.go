package badgerstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
)

// fillStore writes n incompressible chunks of 100 KiB (value log entries)
// and n names (write-ahead log entries), syncs and returns the chunks.
func fillStore(t testing.TB, s *badgerstore.Store, n int) [][]byte {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	var chunks [][]byte
	for i := 0; i < n; i++ {
		data := make([]byte, 100<<10)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		if _, err := s.Put(ctx, data); err != nil {
			t.Fatal(err)
		}
		if err := s.Commit(ctx, []cas.NameOp{{Name: fmt.Sprintf("name%04d", i), Value: []byte("value")}}, false); err != nil {
			t.Fatal(err)
		}
		chunks = append(chunks, data)
	}
	if err := s.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return chunks
}

// storeFiles lists the store's files with a suffix, in name order.
func storeFiles(t testing.TB, dir, suffix string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*"+suffix))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(m)
	return m
}

// crashImage copies the files of an open store, as a kill -9 of its
// process would leave them: what the process wrote through its mappings
// is in the page cache, which the copy reads.
func crashImage(t *testing.T, dir string) string {
	t.Helper()
	img := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		copyFile(t, filepath.Join(dir, e.Name()), filepath.Join(img, e.Name()))
	}
	return img
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

func flipByte(t *testing.T, path string, at func(size int) int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at(len(b))] ^= 0x5a
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func quietOptions(salvage bool) badgerstore.Options {
	return badgerstore.Options{Salvage: salvage, Logger: slog.New(slog.DiscardHandler)}
}

// requireRefused checks that Open refuses dir as damaged and changes
// none of its files.
func requireRefused(t *testing.T, dir string, salvage bool) {
	t.Helper()
	before := dirContents(t, dir)
	s, err := badgerstore.Open(dir, quietOptions(salvage))
	if err == nil {
		s.Close()
		t.Fatal("a damaged store opened")
	}
	if !errors.Is(err, badgerstore.ErrDamaged) {
		t.Fatalf("open: %v, want ErrDamaged", err)
	}
	after := dirContents(t, dir)
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Fatalf("refusing the store changed %s", name)
		}
	}
}

func dirContents(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := make(map[string][]byte)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = b
	}
	return m
}

// TestCheckFilesValueLog: a flipped byte early in the newest value log
// would make Badger cut the log there and drop what follows; the store is
// refused, then salvaged with the original kept, losing only the chunk
// the byte belongs to. A torn tail is a crash's and opens.
func TestCheckFilesValueLog(t *testing.T) {
	dir := t.TempDir()
	s, err := badgerstore.Open(dir, quietOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	chunks := fillStore(t, s, 200)
	img := crashImage(t, dir)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	vlogs := storeFiles(t, img, ".vlog")
	if len(vlogs) == 0 {
		t.Fatal("no value log")
	}
	newest := vlogs[len(vlogs)-1]

	torn := t.TempDir()
	for _, f := range storeFiles(t, img, "") {
		copyFile(t, f, filepath.Join(torn, filepath.Base(f)))
	}
	found, err := badgerstore.CheckFiles(img)
	if err != nil || len(found) != 0 {
		t.Fatalf("a crash image has damage: %v %v", found, err)
	}

	flipByte(t, newest, func(int) int { return 20 + 30<<10 }) // inside the first chunk
	found, err = badgerstore.CheckFiles(img)
	if err != nil || len(found) != 1 || found[0].File != filepath.Base(newest) {
		t.Fatalf("CheckFiles: %v %v, want damage in %s", found, err, newest)
	}
	t.Logf("found: %v", found[0])
	requireRefused(t, img, false)
	damaged, err := os.ReadFile(newest)
	if err != nil {
		t.Fatal(err)
	}

	checkSalvage(t, img, newest, damaged, chunks)
	// A tail cut in the middle of the last entry, as a crash leaves it.
	checkTornTail(t, filepath.Join(torn, filepath.Base(newest)))
}

// checkSalvage opens the store in img, whose value log newest holds
// damaged in the first of chunks, with salvage on: the damaged log is kept
// aside, its chunk reads as corrupt and every other chunk is kept.
func checkSalvage(t *testing.T, img, newest string, damaged []byte, chunks [][]byte) {
	t.Helper()
	s, err := badgerstore.Open(img, quietOptions(true))
	if err != nil {
		t.Fatalf("salvage: %v", err)
	}
	defer s.Close()
	kept, err := filepath.Glob(filepath.Join(img, "damaged-*", filepath.Base(newest)))
	if err != nil || len(kept) != 1 {
		t.Fatalf("no copy of the damaged log kept: %v %v", kept, err)
	}
	if orig, err := os.ReadFile(kept[0]); err != nil || !bytes.Equal(orig, damaged) {
		t.Fatalf("the kept copy differs from the damaged file: %v", err)
	}
	// The salvage gave the damaged entry a new checksum: its chunk reads
	// as corrupt, every other one is kept.
	if found, err := badgerstore.CheckFiles(img); err != nil || len(found) != 0 {
		t.Fatalf("damage left after the salvage: %v %v", found, err)
	}
	ctx := context.Background()
	if _, err := s.Get(ctx, cas.Sum(chunks[0])); !errors.Is(err, cas.ErrCorrupt) {
		t.Fatalf("the damaged chunk: %v, want ErrCorrupt", err)
	}
	for i, c := range chunks[1:] {
		if got, err := s.Get(ctx, cas.Sum(c)); err != nil || !bytes.Equal(got, c) {
			t.Fatalf("chunk %d after the salvage: %v", i+1, err)
		}
	}
}

// checkTornTail cuts the value log tornLog in the middle of its last
// entry, as a crash leaves it: that is no damage, and the store opens.
func checkTornTail(t *testing.T, tornLog string) {
	t.Helper()
	torn := filepath.Dir(tornLog)
	b, err := os.ReadFile(tornLog)
	if err != nil {
		t.Fatal(err)
	}
	last := len(bytes.TrimRight(b, "\x00"))
	if err := os.WriteFile(tornLog, b[:last-1000], 0o600); err != nil {
		t.Fatal(err)
	}
	if found, err := badgerstore.CheckFiles(torn); err != nil || len(found) != 0 {
		t.Fatalf("a torn tail taken for damage: %v %v", found, err)
	}
	s2, err := badgerstore.Open(torn, quietOptions(false))
	if err != nil {
		t.Fatalf("open with a torn tail: %v", err)
	}
	s2.Close()
}

// TestCheckFilesWAL: a flipped byte early in a write-ahead log (what the
// names of a crashed process live in) is refused as damage.
func TestCheckFilesWAL(t *testing.T) {
	dir := t.TempDir()
	s, err := badgerstore.Open(dir, quietOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	fillStore(t, s, 50)
	img := crashImage(t, dir)
	s.Close()
	mems := storeFiles(t, img, ".mem")
	if len(mems) == 0 {
		t.Fatal("no write-ahead log in the crash image")
	}
	flipByte(t, mems[0], func(int) int { return 30 })
	found, err := badgerstore.CheckFiles(img)
	if err != nil || len(found) != 1 || !strings.HasSuffix(found[0].File, ".mem") {
		t.Fatalf("CheckFiles: %v %v, want damage in the write-ahead log", found, err)
	}
	requireRefused(t, img, false)
}

// TestCheckFilesTables: a flipped byte or a truncation of a table is
// refused, even with Salvage; the truncation makes Badger's own open
// panic in a goroutine of its own, which would end the process.
func TestCheckFilesTables(t *testing.T) {
	for _, damage := range []string{"flip", "truncate"} {
		t.Run(damage, func(t *testing.T) {
			dir := t.TempDir()
			s, err := badgerstore.Open(dir, quietOptions(false))
			if err != nil {
				t.Fatal(err)
			}
			fillStore(t, s, 300)
			if err := s.Close(); err != nil { // writes the memtable as a table
				t.Fatal(err)
			}
			ssts := storeFiles(t, dir, ".sst")
			if len(ssts) == 0 {
				t.Fatal("no table")
			}
			if damage == "flip" {
				flipByte(t, ssts[0], func(n int) int { return n / 3 })
			} else {
				b, err := os.ReadFile(ssts[0])
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(ssts[0], b[:len(b)/2], 0o600); err != nil {
					t.Fatal(err)
				}
			}
			found, err := badgerstore.CheckFiles(dir)
			if err != nil || len(found) != 1 || found[0].Salvageable {
				t.Fatalf("CheckFiles: %v %v, want one damaged table", found, err)
			}
			t.Logf("found: %v", found[0])
			requireRefused(t, dir, true)
		})
	}
}

// BenchmarkCheckFiles is what a start pays for the check: a crash image of
// a store with 50 MB of chunks (a newest value log mapped at 128 MiB, its
// write-ahead logs and no table yet).
func BenchmarkCheckFiles(b *testing.B) {
	dir := b.TempDir()
	s, err := badgerstore.Open(dir, quietOptions(false))
	if err != nil {
		b.Fatal(err)
	}
	fillStore(b, s, 500)
	img := b.TempDir()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if !e.IsDir() && e.Name() != "LOCK" {
			in, _ := os.ReadFile(filepath.Join(dir, e.Name()))
			os.WriteFile(filepath.Join(img, e.Name()), in, 0o600)
		}
	}
	s.Close()
	b.ResetTimer()
	for b.Loop() {
		if found, err := badgerstore.CheckFiles(img); err != nil || len(found) != 0 {
			b.Fatal(found, err)
		}
	}
}

// TestDamagedTableBlockOnRead: a byte flipped in a table's data block
// while the store is open (after the check at open) makes the reads that
// load the block fail; a name never reads as other bytes, and nothing
// panics.
func TestDamagedTableBlockOnRead(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := badgerstore.Open(dir, quietOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	value := func(i int) []byte {
		return []byte(fmt.Sprintf("head-of-session-%04d-%s", i, bytes.Repeat([]byte("v"), 40)))
	}
	var ops []cas.NameOp
	for i := range 200 {
		ops = append(ops, cas.NameOp{Name: fmt.Sprintf("session/%04d", i), Value: value(i)})
	}
	if err := s.Commit(ctx, ops, true); err != nil {
		t.Fatal(err)
	}
	small := []byte("a small chunk, kept in the table itself rather than in the value log")
	ref, err := s.Put(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil { // writes the memtable as a table
		t.Fatal(err)
	}
	if s, err = badgerstore.Open(dir, quietOptions(false)); err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	ssts := storeFiles(t, dir, ".sst")
	if len(ssts) != 1 {
		t.Fatalf("%d tables, want 1", len(ssts))
	}
	f, err := os.OpenFile(ssts[0], os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(b, value(100))
	if at < 0 {
		t.Fatal("value not found in the table")
	}
	// Flip a byte of the value in place, as a disk would: the open table's
	// mapping sees it.
	if _, err := f.WriteAt([]byte{b[at+len(value(100))-1] ^ 0x01}, int64(at+len(value(100))-1)); err != nil {
		t.Fatal(err)
	}
	got, err := s.GetName(ctx, "session/0100")
	if err == nil {
		t.Fatalf("a damaged table block read as %q, want an error", got)
	}
	if !errors.Is(err, cas.ErrNotFound) && !errors.Is(err, cas.ErrCorrupt) {
		t.Fatalf("GetName: %v", err)
	}
	// Every other read of that block fails too, and none panics or returns
	// other bytes.
	for i := range 200 {
		if got, err := s.GetName(ctx, fmt.Sprintf("session/%04d", i)); err == nil && !bytes.Equal(got, value(i)) {
			t.Fatalf("session/%04d read as %q", i, got)
		}
	}
	if got, err := s.Get(ctx, ref); err == nil && !bytes.Equal(got, small) {
		t.Fatalf("small chunk read as %q", got)
	}
}
