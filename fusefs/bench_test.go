package fusefs

// Mount benchmarks. Every benchmark but the
// snapshot ones runs the same code twice, as the sub-benchmarks
// .../native (a directory on the disk under the store) and .../homefs (a
// mount of a Badger-backed session whose store lives next to that
// directory), so that the figures that matter are ratios measured under
// the same conditions. The tree benchmarks run tar, git and rm; the
// small-operation ones run their loop in a child process
// (benchchild_test.go), as an agent's harness is a process of its own.
// internal/benchreport turns the output into the table of
// docs/BENCHMARKS.md.
//
// Environment:
//   - HOMEFS_BENCH_SCALE=small shrinks every size for a smoke run (under
//     three minutes, most of it the untimed waits of awaitInodeReuse);
//     unset or "full" uses the sizes of the issue.
//   - HOMEFS_BENCH_DIR puts the store, the native directory and the
//     mountpoint below that directory instead of the default temp dir.
//   - HOMEFS_BENCH_NOSTAGING=1 turns staged files off (Options.NoStaging),
//     for a before/after of staging in one build.
//
// Page cache: before each timed sequential read, every dirty page is
// written back and the page cache is dropped (echo 3 >
// /proc/sys/vm/drop_caches; root only), for both targets, so that native
// reads come from the disk and homefs reads come from Badger's files on
// that disk, not from memory. Without root the reads are warm and the
// benchmark says so in its log.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/catalog"
)

// benchSizes are the workload sizes of one scale.
type benchSizes struct {
	seqBytes  int64   // sequential write and read
	randFile  int64   // file the 4 KiB random writes land in
	treeDir   string  // part of $GOROOT that is tarred up, relative to GOROOT
	treeEdit  string  // file of the tree changed before each capture or fork
	rollouts  []int64 // rollout sizes of the snapshot benchmarks
	seqBlock  int     // write and read size
	jsonLines int     // JSON lines in the append pool (a multiple of 32)
}

func benchScale() benchSizes {
	s := benchSizes{
		seqBytes:  1 << 30,
		randFile:  64 << 20,
		treeDir:   "src",
		treeEdit:  "src/fmt/print.go",
		rollouts:  []int64{10 << 20, 100 << 20, 1 << 30},
		seqBlock:  1 << 20,
		jsonLines: 1024,
	}
	if os.Getenv("HOMEFS_BENCH_SCALE") == "small" {
		s.seqBytes = 64 << 20
		s.randFile = 16 << 20
		s.treeDir = "src/go"
		s.treeEdit = "src/go/ast/ast.go"
		s.rollouts = []int64{1 << 20, 4 << 20, 16 << 20}
	}
	return s
}

// benchRig is a Badger-backed engine with one session mounted, and a
// native directory on the same filesystem as the store.
type benchRig struct {
	sizes   benchSizes
	engine  *Engine
	session string
	native  string
	mnt     string
	stamp   uint64 // makes every written block unique, so the store cannot deduplicate it
	pool    []byte // incompressible bytes the written blocks are cut from
}

func newBenchRig(b *testing.B) *benchRig {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("mount benchmarks need root (DirectMount, drop_caches)")
	}
	base := b.TempDir()
	if d := os.Getenv("HOMEFS_BENCH_DIR"); d != "" {
		var err error
		if base, err = os.MkdirTemp(d, "homefs-bench-"); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(base) })
	}
	r := &benchRig{
		sizes:   benchScale(),
		session: "bench",
		native:  filepath.Join(base, "native"),
		mnt:     filepath.Join(base, "mnt"),
	}
	storeDir := filepath.Join(base, "store")
	for _, d := range []string{r.native, r.mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	store, err := badgerstore.Open(storeDir, badgerstore.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	cat := catalog.New(store)
	opts := Options{StoreDir: storeDir, Logger: quiet, NoStaging: os.Getenv("HOMEFS_BENCH_NOSTAGING") != "", URing: URingOn}
	if os.Getenv("HOMEFS_BENCH_METRICS") != "" {
		opts.Observer = newBenchObserver()
	}
	r.engine = New(store, cat, opts)
	ctx := context.Background()
	if _, err := cat.CreateSession(ctx, r.session, ""); err != nil {
		b.Fatal(err)
	}
	if _, err := r.engine.Mount(ctx, r.session, "", r.mnt, MountOptions{}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := r.engine.Close(context.Background()); err != nil {
			b.Errorf("close engine: %v", err)
		}
		if err := store.Close(); err != nil {
			b.Errorf("close store: %v", err)
		}
	})
	r.pool = make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{1}).Read(r.pool)
	return r
}

// targets runs fn as the sub-benchmarks native and homefs, each given its
// directory.
func (r *benchRig) targets(b *testing.B, fn func(b *testing.B, dir string)) {
	b.Run("native", func(b *testing.B) { fn(b, r.native) })
	b.Run("homefs", func(b *testing.B) { fn(b, r.mnt) })
}

// block returns n incompressible bytes (n ≤ 1 MiB) that no earlier block
// repeats: a fresh stamp every 4 KiB keeps each 64 KiB chunk unique. The
// slice is valid until the next call.
func (r *benchRig) block(k int64, n int) []byte {
	const blockMax = 1 << 20
	off := (k % int64(len(r.pool)/blockMax)) * blockMax
	buf := r.pool[off : off+int64(n)]
	for p := 0; p+8 <= n; p += 4096 {
		r.stamp++
		putUint64(buf[p:], r.stamp)
	}
	return buf
}

func putUint64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// writeFile writes size bytes in blocks to a new file at path and fsyncs it.
func (r *benchRig) writeFile(b *testing.B, path string, size int64) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	bs := int64(r.sizes.seqBlock)
	for k := int64(0); k*bs < size; k++ {
		if _, err := f.Write(r.block(k, int(min(bs, size-k*bs)))); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
}

// settle finishes what earlier measurements left for later, so that one
// does not pay for another's: sync writes back the kernel's dirty pages,
// and a flush of the session stores the daemon's write buffers (which wait
// for the next flush while the engine's buffers are under their budget:
// an untar's 137 MB), as the periodic flush would within seconds.
func (r *benchRig) settle(b *testing.B) {
	syscall.Sync()
	r.flush(b)
}

// flush makes the session durable.
func (r *benchRig) flush(b *testing.B) {
	if err := r.engine.Sync(context.Background(), r.session); err != nil {
		b.Fatalf("flush: %v", err)
	}
}

// dropCaches empties the page cache (and the dentry and inode caches).
func dropCaches(b *testing.B) {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err != nil {
		b.Logf("page cache not dropped, reads are warm: %v", err)
	}
}

// BenchmarkSeqWrite: one op writes a new file in blocks and fsyncs it. On
// homefs the file is staged (staged.go): its content enters the store
// later, when a flush absorbs it. homefs+capture also closes the file and
// captures the session, so it includes that: what it costs to have the
// bytes in a snapshot.
func BenchmarkSeqWrite(b *testing.B) {
	r := newBenchRig(b)
	size := r.sizes.seqBytes
	op := func(capture bool) func(b *testing.B, dir string) {
		return func(b *testing.B, dir string) {
			b.SetBytes(size)
			for i := 0; b.Loop(); i++ {
				path := filepath.Join(dir, fmt.Sprintf("seq-%d", i))
				r.writeFile(b, path, size)
				if capture {
					if _, _, err := r.engine.Capture(context.Background(), r.session, "bench", nil); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				if err := os.Remove(path); err != nil {
					b.Fatal(err)
				}
				r.settle(b)
				b.StartTimer()
			}
		}
	}
	r.targets(b, op(false))
	b.Run("homefs+capture", func(b *testing.B) { op(true)(b, r.mnt) })
}

// stored waits until every file written through the mount is in the
// store (no staged file left), so that reads measure the store.
func (r *benchRig) stored(b *testing.B) {
	s, err := r.engine.live(context.Background(), r.session)
	if err != nil {
		b.Fatal(err)
	}
	for range 1000 {
		if err := r.engine.Sync(context.Background(), r.session); err != nil {
			b.Fatal(err)
		}
		// Reads from the store, not from a read copy the absorber kept.
		s.freeze.Lock()
		s.dropKept()
		s.freeze.Unlock()
		if len(s.backed.list()) == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond) // the kernel's release of the writer
	}
	b.Fatal("staged files are still open")
}

// readWhole reads path to its end in len(buf) reads and checks it held
// size bytes.
func readWhole(b *testing.B, path string, buf []byte, size int64) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	var got int64
	for {
		n, err := f.Read(buf)
		got += int64(n)
		if err != nil {
			break
		}
	}
	if got != size {
		b.Fatalf("read %d bytes, want %d", got, size)
	}
}

func BenchmarkSeqRead(b *testing.B) {
	r := newBenchRig(b)
	size := r.sizes.seqBytes
	for _, dir := range []string{r.native, r.mnt} {
		r.writeFile(b, filepath.Join(dir, "seq"), size)
	}
	r.stored(b)
	buf := make([]byte, r.sizes.seqBlock)
	r.targets(b, func(b *testing.B, dir string) {
		b.SetBytes(size)
		for b.Loop() {
			b.StopTimer()
			dropCaches(b)
			b.StartTimer()
			readWhole(b, filepath.Join(dir, "seq"), buf, size)
		}
	})
}

// BenchmarkSeqReadCached: one op reads the file of BenchmarkSeqRead again
// with the page cache as the read before left it: on homefs the kernel
// keeps a file's pages across opens while its content is unchanged
// (FOPEN_KEEP_CACHE), as ext4 does.
func BenchmarkSeqReadCached(b *testing.B) {
	r := newBenchRig(b)
	size := r.sizes.seqBytes
	for _, dir := range []string{r.native, r.mnt} {
		r.writeFile(b, filepath.Join(dir, "seq"), size)
	}
	r.stored(b)
	buf := make([]byte, r.sizes.seqBlock)
	r.targets(b, func(b *testing.B, dir string) {
		readWhole(b, filepath.Join(dir, "seq"), buf, size) // fills the page cache
		b.SetBytes(size)
		for b.Loop() {
			readWhole(b, filepath.Join(dir, "seq"), buf, size)
		}
	})
}

// BenchmarkSeqReadJustWritten: one op writes a new file in blocks, fsyncs
// and closes it (untimed), then reads it whole in blocks at once, as `dd
// … conv=fsync; cat` does: on homefs the file was staged, and its last
// writer's release queued it for the absorber (staged.go), which holds the
// node's lock while it takes the content into write buffers. The page
// cache is kept: the read measures what a reader right after the writer
// waits for, not the disk.
func BenchmarkSeqReadJustWritten(b *testing.B) {
	r := newBenchRig(b)
	size := r.sizes.seqBytes
	buf := make([]byte, r.sizes.seqBlock)
	r.targets(b, func(b *testing.B, dir string) {
		b.SetBytes(size)
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			path := filepath.Join(dir, fmt.Sprintf("fresh-%d", i))
			r.writeFile(b, path, size)
			b.StartTimer()
			readWhole(b, path, buf, size)
			b.StopTimer()
			if err := os.Remove(path); err != nil {
				b.Fatal(err)
			}
			r.settle(b)
			b.StartTimer()
		}
	})
}

// randBatch is how many 4 KiB writes (each followed by fsync) one op of
// BenchmarkRandWrite4K makes, so that even -benchtime=1x measures many.
const randBatch = 128

// BenchmarkRandWrite4K: one op is randBatch 4 KiB writes at random aligned
// offsets of an existing file, each followed by fsync.
func BenchmarkRandWrite4K(b *testing.B) {
	r := newBenchRig(b)
	size := r.sizes.randFile
	for _, dir := range []string{r.native, r.mnt} {
		r.writeFile(b, filepath.Join(dir, "rand"), size)
	}
	r.settle(b)
	r.targets(b, func(b *testing.B, dir string) {
		inChild(b, randBatch*4096, "bench-randwrite", filepath.Join(dir, "rand"), fmt.Sprint(size))
	})
}

// jsonLines returns n JSON lines of 200 to 1000 bytes (newline included)
// shaped like a Codex rollout, from a fixed seed, and their total length.
func jsonLines(n int) ([][]byte, int64) {
	rng := rand.New(rand.NewPCG(32, 1000))
	words := strings.Fields("the of a to and in is it file func return error test go build run diff patch " +
		"session fork capture mount write read sync index tree chunk store badger kernel")
	lines := make([][]byte, n)
	var total int64
	for i := range lines {
		want := 200 + rng.IntN(801)
		var buf bytes.Buffer
		fmt.Fprintf(&buf, `{"timestamp":"2025-06-01T12:%02d:%02d.%03dZ","type":"response_item","payload":{"type":"message","role":"assistant","content":"`,
			i/3600%60, i/60%60, i%1000)
		const tail = "\"}}\n"
		for buf.Len() < want-len(tail) {
			buf.WriteString(words[rng.IntN(len(words))])
			buf.WriteByte(' ')
		}
		buf.Truncate(want - len(tail))
		buf.WriteString(tail)
		lines[i] = buf.Bytes()
		total += int64(len(lines[i]))
	}
	return lines, total
}

// BenchmarkJSONLAppend: one op appends the whole pool of lines with
// O_APPEND, with an fsync after every 32nd line (the rollout pattern),
// through a write-only descriptor (as Pi and Claude Code open theirs; it
// gets passthrough).
func BenchmarkJSONLAppend(b *testing.B) { benchJSONL(b, "wronly") }

// BenchmarkJSONLAppendRW is the same through an O_RDWR|O_APPEND descriptor,
// the one Codex appends its rollout through (served by the daemon).
func BenchmarkJSONLAppendRW(b *testing.B) { benchJSONL(b, "rdwr") }

// codexTurnLines is how many lines BenchmarkJSONLAppendRWNoSync appends.
const codexTurnLines = 20000

// BenchmarkJSONLAppendRWNoSync is Codex's own pattern: an existing rollout
// appended to through O_RDWR|O_APPEND, codexTurnLines lines, never
// fsynced. The file is in the durable head before the loop, so every
// append is a write the journal takes (journal.go).
func BenchmarkJSONLAppendRWNoSync(b *testing.B) {
	r := newBenchRig(b)
	_, total := jsonLines(codexTurnLines)
	r.targets(b, func(b *testing.B, dir string) {
		path := filepath.Join(dir, "rollout.jsonl")
		b.StopTimer()
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			b.Fatal(err)
		}
		r.settle(b)
		b.StartTimer()
		inChild(b, total, "bench-jsonl", path, "rdwr-nosync", fmt.Sprint(codexTurnLines))
		b.StopTimer()
		os.Remove(path)
		r.settle(b)
	})
}

func benchJSONL(b *testing.B, access string) {
	r := newBenchRig(b)
	_, total := jsonLines(r.sizes.jsonLines)
	r.targets(b, func(b *testing.B, dir string) {
		path := filepath.Join(dir, "rollout.jsonl")
		inChild(b, total, "bench-jsonl", path, access, fmt.Sprint(r.sizes.jsonLines))
		b.StopTimer()
		os.Remove(path)
		r.settle(b)
	})
}

// makeTreeTar tars up the scale's part of $GOROOT into a temp file, once
// per benchmark.
func makeTreeTar(b *testing.B, sizes benchSizes) string {
	b.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		b.Fatalf("go env GOROOT: %v", err)
	}
	goroot := strings.TrimSpace(string(out))
	tarPath := filepath.Join(b.TempDir(), "tree.tar")
	run(b, "", "tar", "-cf", tarPath, "-C", goroot, sizes.treeDir)
	return tarPath
}

// run runs a command in dir and fails the benchmark with its output if it
// fails.
func run(b *testing.B, dir, name string, args ...string) {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.com",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.com",
		"GIT_AUTHOR_DATE=2025-06-01T12:00:00Z", "GIT_COMMITTER_DATE=2025-06-01T12:00:00Z")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// BenchmarkTree: untar of Go's source tree (about 12,000 files at full
// scale), git status on it, and rm -rf of it.
func BenchmarkTree(b *testing.B) {
	r := newBenchRig(b)
	tarPath := makeTreeTar(b, r.sizes)
	untar := func(b *testing.B, dir string) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		run(b, dir, "tar", "-xf", tarPath)
	}
	rmrf := func(b *testing.B, dir string) { run(b, "", "rm", "-rf", dir) }

	// untars measures untar into fresh directories. With durable, the
	// time includes making the tree durable: sync for the native disk, and
	// for homefs a flush of the session too, which hashes, compresses and
	// stores what the untar left in write buffers.
	untars := func(b *testing.B, durable bool) {
		// The trees are removed once both targets are measured: see
		// awaitInodeReuse.
		var trees []string
		r.targets(b, func(b *testing.B, dir string) {
			awaitInodeReuse(b)
			for b.Loop() {
				d := filepath.Join(dir, fmt.Sprintf("untar-%d", len(trees)))
				untar(b, d)
				trees = append(trees, d)
				if durable {
					syscall.Sync()
					if dir == r.mnt {
						r.flush(b)
					}
					continue
				}
				b.StopTimer()
				r.settle(b)
				b.StartTimer()
			}
		})
		for _, d := range trees {
			rmrf(b, d)
		}
		massDeleted()
	}
	b.Run("untar", func(b *testing.B) { untars(b, false) })
	b.Run("untar+sync", func(b *testing.B) { untars(b, true) })
	b.Run("git-status", func(b *testing.B) {
		r.targets(b, func(b *testing.B, dir string) {
			d := filepath.Join(dir, "git")
			if _, err := os.Stat(d); errors.Is(err, os.ErrNotExist) {
				untar(b, d)
				run(b, d, "git", "init", "-q")
				// No background gc or maintenance after the commit: it would
				// run during the measurements.
				run(b, d, "git", "config", "gc.auto", "0")
				run(b, d, "git", "config", "maintenance.auto", "false")
				run(b, d, "git", "add", "-A")
				run(b, d, "git", "commit", "-q", "-m", "tree")
				run(b, d, "git", "status", "--porcelain") // refreshes the index once
				r.settle(b)
			}
			for b.Loop() {
				run(b, d, "git", "status", "--porcelain")
			}
		})
	})
	b.Run("rm-rf", func(b *testing.B) {
		r.targets(b, func(b *testing.B, dir string) {
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				d := filepath.Join(dir, fmt.Sprintf("rm-%d", i))
				untar(b, d)
				r.settle(b)
				b.StartTimer()
				rmrf(b, d)
			}
			massDeleted()
		})
	})
	b.Cleanup(massDeleted) // the rig's directory goes, trees and all
}

// lastMassDelete is when a benchmark last removed a tree of files; an
// earlier run may just have removed its own.
var lastMassDelete = time.Now()

func massDeleted() { lastMassDelete = time.Now() }

// awaitInodeReuse waits, untimed, until ext4 may reuse the inodes the last
// removal of a tree freed. Without a journal (as here), ext4 skips every
// inode freed in the last 60 seconds when it allocates one, one at a time
// (recently_deleted in fs/ext4/ialloc.c), so an untar right after an rm -rf
// of a tree as large took 1.2-1.8 s natively instead of 0.15-0.45 s: the
// benchmark's own cleanup was billed to the next native untar. The window
// is 300 seconds longer for an inode whose table block is dirty, so a sync
// comes first; the untar itself dirties blocks as it allocates, which
// brings some of the freed inodes back into the window: native figures
// still vary (see docs/BENCHMARKS.md). homefs allocates few ext4 inodes
// (staging files are recycled) and is not affected.
func awaitInodeReuse(b *testing.B) {
	const reuse = 65 * time.Second
	syscall.Sync()
	if wait := time.Until(lastMassDelete.Add(reuse)); wait > 0 {
		b.Logf("waiting %v for ext4 to reuse the inodes of a removed tree", wait.Round(time.Second))
		time.Sleep(wait)
	}
}

// BenchmarkSnapshot: Engine.Capture and Engine.Fork of a session holding
// Go's source tree and a rollout that grows through the sizes of the scale,
// each after one file of the tree changed. Only the engine call is timed;
// the goal is under 10 ms, flat across sizes.
func BenchmarkSnapshot(b *testing.B) {
	r := newBenchRig(b)
	ctx := context.Background()
	tarPath := makeTreeTar(b, r.sizes)
	run(b, r.mnt, "tar", "-xf", tarPath)
	rollout, err := os.OpenFile(filepath.Join(r.mnt, "rollout.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		b.Fatal(err)
	}
	defer rollout.Close()
	lines, _ := jsonLines(r.sizes.jsonLines)
	var written int64
	edit := filepath.Join(r.mnt, r.sizes.treeEdit)
	var edits int
	change := func(b *testing.B) {
		edits++
		f, err := os.OpenFile(edit, os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fmt.Fprintf(f, "// edit %08d\n", edits); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	forks := 0
	for _, size := range r.sizes.rollouts {
		// A sequence number keeps passes through the pool from repeating
		// chunks the store would deduplicate.
		for i := 0; written < size; i++ {
			line := lines[i%len(lines)]
			n, err := fmt.Fprintf(rollout, `{"seq":%d,%s`, i, line[1:])
			if err != nil {
				b.Fatal(err)
			}
			written += int64(n)
		}
		if err := r.engine.Sync(ctx, r.session); err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("rollout=%dMiB", size>>20)
		b.Run(name+"/capture", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				change(b)
				b.StartTimer()
				if _, _, err := r.engine.Capture(ctx, r.session, "bench", nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(name+"/fork", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				change(b)
				forks++
				target := fmt.Sprintf("fork-%d", forks)
				b.StartTimer()
				if _, err := r.engine.Fork(ctx, r.session, target); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRoundTrip: one op is an fchmod of an open file, which the
// kernel cannot answer itself: one synchronous round trip to the daemon
// (SETATTR) on the mount, a system call on the native disk. It is the unit
// the per-file cost of an untar is made of (eight such round trips a file,
// docs/ARCHITECTURE.md, "Known limits").
func BenchmarkRoundTrip(b *testing.B) {
	r := newBenchRig(b)
	r.targets(b, func(b *testing.B, dir string) {
		inChild(b, 0, "bench-roundtrip", filepath.Join(dir, "round-trip"))
	})
}

// BenchmarkSmallFile: one op is one file written as tar writes it (open
// O_CREAT|O_EXCL, write 2 KiB, futimens, fchown, fchmod, close), 1,000
// files per directory: untar's cost per file without the tar file, the
// directories and most of the noise. Nothing is removed until the end
// (see awaitInodeReuse). It comes last in the file, so that go test runs
// it after the others: its native target makes some 100,000 files a
// second, whose removal would slow every native untar for minutes.
func BenchmarkSmallFile(b *testing.B) {
	r := newBenchRig(b)
	var dirs []string
	r.targets(b, func(b *testing.B, dir string) {
		awaitInodeReuse(b)
		base := filepath.Join(dir, fmt.Sprintf("small-%d", len(dirs)))
		dirs = append(dirs, base)
		if err := os.Mkdir(base, 0o755); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer() // the wait is not the workload's: N grows from what the run took
		inChild(b, 0, "bench-smallfile", base)
		b.StopTimer()
		r.settle(b)
	})
	for _, d := range dirs {
		run(b, "", "rm", "-rf", d)
	}
	massDeleted()
}

// benchObserver does per request what the daemon's metrics do
// (internal/daemon/metrics.go): an Observe on a histogram resolved at
// start, and a counter for an error. HOMEFS_BENCH_METRICS=1 installs it,
// to measure what --metrics costs a request.
type benchObserver struct {
	lat  [NumOps]prometheus.Observer
	errs *prometheus.CounterVec
}

func newBenchObserver() *benchObserver {
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "lat", Buckets: prometheus.ExponentialBuckets(10e-6, 4, 10)}, []string{"op"})
	o := &benchObserver{errs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "errs"}, []string{"op", "errno"})}
	for op := range NumOps {
		o.lat[op] = lat.WithLabelValues(op.String())
	}
	return o
}

func (o *benchObserver) Request(op Op, errno syscall.Errno, d time.Duration) {
	o.lat[op].Observe(d.Seconds())
	if errno != 0 {
		o.errs.WithLabelValues(op.String(), errno.Error()).Inc()
	}
}

func (o *benchObserver) Flush(time.Duration, error) {}
