package badgerstore_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/cas/castest"
)

func openBadger(t *testing.T, dir string) *badgerstore.Store {
	t.Helper()
	s, err := badgerstore.Open(dir, badgerstore.Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBadgerConformance(t *testing.T) {
	castest.Run(t, func(t *testing.T) cas.Store { return openBadger(t, t.TempDir()) })
}

// TestBadgerCompresses: compressible content is stored smaller, and
// Enumerate reports both sizes.
func TestBadgerCompresses(t *testing.T) {
	ctx := context.Background()
	s := openBadger(t, t.TempDir())
	j := castest.JSONL(1<<20, 2)
	ref, err := s.Put(ctx, j)
	if err != nil {
		t.Fatal(err)
	}
	var ci cas.ChunkInfo
	if err := s.Enumerate(ctx, func(c cas.ChunkInfo) error {
		if c.Ref == ref {
			ci = c
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ci.Size != int64(len(j)) {
		t.Fatalf("Size %d, want %d", ci.Size, len(j))
	}
	if ci.StoredSize == 0 || ci.StoredSize > int64(len(j))/2 {
		t.Errorf("1 MiB of JSONL stored in %d bytes; want compression", ci.StoredSize)
	}
}

func TestBadgerReopen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openBadger(t, dir)
	var refs []cas.Ref
	for _, sm := range castest.Samples() {
		r, err := s.Put(ctx, sm.Data)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	if err := s.Commit(ctx, []cas.NameOp{{Name: "head", Value: []byte("v1")}}, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = openBadger(t, dir)
	for i, sm := range castest.Samples() {
		got, err := s.Get(ctx, refs[i])
		if err != nil || !bytes.Equal(got, sm.Data) {
			t.Fatalf("%s after reopen: %v", sm.Name, err)
		}
	}
	if v, err := s.GetName(ctx, "head"); err != nil || string(v) != "v1" {
		t.Fatalf("name after reopen: %q, %v", v, err)
	}
}

// Child processes started by the tests below find their role here.
const (
	envChild = "HOMEFS_CAS_TEST_CHILD"
	envDir   = "HOMEFS_CAS_TEST_DIR"
)

// durableData is what the kill test's child writes; the parent recomputes it.
func durableData(i int) []byte {
	rng := rand.New(rand.NewPCG(uint64(i), 0))
	data := make([]byte, 16<<10+rng.IntN(48<<10))
	for j := range data {
		if i%2 == 0 {
			data[j] = byte(rng.Uint32()) // incompressible
		} else {
			data[j] = "abcd\n"[rng.IntN(5)] // compressible
		}
	}
	return data
}

const durableChunks = 300 // ~15 MiB: past a memtable flush and several txns

// TestChild is not a test: it runs the child side of the process tests.
func TestChild(t *testing.T) {
	role := os.Getenv(envChild)
	if role == "" {
		t.Skip("only runs as a child process")
	}
	ctx := context.Background()
	s, err := badgerstore.Open(os.Getenv(envDir), badgerstore.Options{})
	if err != nil {
		fmt.Println("open failed:", err)
		os.Exit(1)
	}
	switch role {
	case "hold":
		fmt.Println("opened")
	case "durable":
		b := s.NewBatch()
		for i := range durableChunks {
			if i%3 == 0 {
				_, err = b.Put(durableData(i))
			} else {
				_, err = s.Put(ctx, durableData(i))
			}
			if err != nil {
				fmt.Println("put failed:", err)
				os.Exit(1)
			}
		}
		if err := b.Commit(ctx, false); err != nil {
			fmt.Println("commit failed:", err)
			os.Exit(1)
		}
		if err := s.Commit(ctx, []cas.NameOp{{Name: "head", Value: []byte("synced")}}, false); err != nil {
			fmt.Println("names failed:", err)
			os.Exit(1)
		}
		if err := s.Sync(ctx); err != nil {
			fmt.Println("sync failed:", err)
			os.Exit(1)
		}
		fmt.Println("synced")
		// Keep writing, so the kill lands in the middle of work.
		for i := 0; ; i++ {
			s.Put(ctx, durableData(1e6+i))
		}
	}
	time.Sleep(time.Hour) // until killed
}

// startChild runs TestChild in a new process and waits for its first line.
func startChild(t *testing.T, role, dir, want string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChild+"="+role, envDir+"="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != want {
		t.Fatalf("child said %q (%v), want %q", line, err, want)
	}
	return cmd
}

func TestBadgerSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	dir := t.TempDir()
	cmd := startChild(t, "durable", dir, "synced")
	time.Sleep(50 * time.Millisecond) // let it write past the sync point
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	// A kill leaves torn tails, never damage.
	if found, err := badgerstore.CheckFiles(dir); err != nil || len(found) != 0 {
		t.Fatalf("kill -9 left damage: %v %v", found, err)
	}
	s := openBadger(t, dir)
	ctx := context.Background()
	for i := range durableChunks {
		data := durableData(i)
		got, err := s.Get(ctx, cas.Sum(data))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("chunk %d after kill -9: %v", i, err)
		}
	}
	if v, err := s.GetName(ctx, "head"); err != nil || string(v) != "synced" {
		t.Fatalf("name after kill -9: %q, %v", v, err)
	}
	// Whatever the child was writing when killed is either whole or absent.
	err := s.Enumerate(ctx, func(ci cas.ChunkInfo) error {
		if _, err := s.Get(ctx, ci.Ref); err != nil {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("a chunk is damaged after kill -9: %v", err)
	}
}

func TestBadgerLocked(t *testing.T) {
	dir := t.TempDir()
	s := openBadger(t, dir)
	if _, err := badgerstore.Open(dir, badgerstore.Options{}); !errors.Is(err, badgerstore.ErrLocked) {
		t.Fatalf("second open in the same process: %v, want ErrLocked", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if testing.Short() {
		return
	}
	cmd := startChild(t, "hold", dir, "opened")
	_, err := badgerstore.Open(dir, badgerstore.Options{})
	if !errors.Is(err, badgerstore.ErrLocked) {
		t.Fatalf("open while another process holds the store: %v, want ErrLocked", err)
	}
	if !strings.Contains(err.Error(), "in use by another process") {
		t.Errorf("error does not say why: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	openBadger(t, dir) // the lock dies with its process
}

func TestBadgerOpenErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := badgerstore.Open(file, badgerstore.Options{}); err == nil {
		t.Fatal("Open on a regular file succeeded")
	}
	if _, err := badgerstore.Open(t.TempDir(), badgerstore.Options{ValueLogFileSize: 1 << 20}); err == nil {
		t.Fatal("Open with a value log smaller than a chunk succeeded")
	}
}

func TestBadgerLargeBatch(t *testing.T) {
	// A batch over BatchBytes is written in several transactions.
	ctx := context.Background()
	s, err := badgerstore.Open(t.TempDir(), badgerstore.Options{BatchBytes: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	b := s.NewBatch()
	var refs []cas.Ref
	for i := range 64 {
		r, err := b.Put(durableData(i))
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, r)
	}
	if err := b.Commit(ctx, true); err != nil {
		t.Fatal(err)
	}
	has, err := s.HasMany(ctx, refs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range has {
		if !ok {
			t.Fatalf("chunk %d of a large batch missing", i)
		}
	}
}
