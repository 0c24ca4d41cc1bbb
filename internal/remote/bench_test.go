package remote_test

// Benchmarks of the remote tier against a real S3 server (versitygw on
// 127.0.0.1), in one run so that every figure has its baseline beside it:
//
//   - Push: first push of a session holding one rollout (MB/s of plain
//     bytes).
//   - SecondPush: push after appending one line to the rollout; reports
//     the bytes uploaded (must be O(change), not O(rollout)).
//   - TTFB/homefs: on a fresh host, pull the snapshot lazily (nodes only),
//     mount it, open the rollout and read its first 4 KiB.
//   - TTFB/whole-object: the same bytes stored as one S3 object, fetched
//     whole with GetObject (what a host needs before it can use a rollout
//     it cannot read lazily); first-byte time reported beside it.
//   - LazyRead: on a fresh host, read the whole rollout through the mount,
//     chunks fetched on demand with read-ahead (MB/s).
//   - PushEncrypted, SecondPushEncrypted, TTFB/homefsEncrypted,
//     LazyReadEncrypted: the same against an encrypted remote.
//
// The rollout is 1 GiB of JSONL (fixed seed); HOMEFS_BENCH_SCALE=small
// makes it 64 MiB. Run:
//
//	HOMEFS_VERSITYGW=$(scripts/install-versitygw.sh) \
//	  go test ./internal/remote -run '^$' -bench . -benchtime 1x -timeout 60m

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/remote"
	remotes3 "github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/internal/testkit/needfuse"
	"github.com/homefs/homefs/manifest"
)

func rolloutSize() int64 {
	if os.Getenv("HOMEFS_BENCH_SCALE") == "small" {
		return 64 << 20
	}
	return 1 << 30
}

// writeRollout writes size bytes of JSONL, from a fixed seed, to path.
func writeRollout(tb testing.TB, path string, size int64) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.New(rand.NewPCG(2026, 6))
	words := []string{"the", "model", "reads", "file", "tool_call", "function", "returns", "error", "patch", "diff",
		"test", "passes", "go", "build", "./...", "import", "context", "struct", "interface", "commit"}
	var n int64
	for i := 0; n < size; i++ {
		line := fmt.Appendf(nil, `{"seq":%d,"role":"assistant","id":"%016x","text":"`, i, rng.Uint64())
		for range 8 + rng.IntN(40) {
			line = append(line, words[rng.IntN(len(words))]...)
			line = append(line, ' ')
		}
		line = append(line, "\"}\n"...)
		if n+int64(len(line)) > size {
			line = line[:size-n]
		}
		w.Write(line)
		n += int64(len(line))
	}
	if err := w.Flush(); err != nil {
		tb.Fatal(err)
	}
}

// putFileFrom stores the file at path as an entry, chunk by chunk.
func putFileFrom(tb testing.TB, p cas.Putter, path string) manifest.Entry {
	tb.Helper()
	ctx := context.Background()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	cl := manifest.NewChunkList()
	buf := make([]byte, manifest.ChunkSize)
	var size int64
	for i := 0; ; i++ {
		n, err := io.ReadFull(f, buf)
		if n > 0 {
			ref, perr := p.Put(ctx, buf[:n])
			if perr != nil {
				tb.Fatal(perr)
			}
			cl.Set(i, ref)
			size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
	chunks, index, depth, err := cl.Store(ctx, p)
	if err != nil {
		tb.Fatal(err)
	}
	return manifest.Entry{Kind: manifest.KindFile, Mode: 0o644, Size: size, MtimeNs: 1e18, CtimeNs: 1e18,
		Chunks: chunks, Index: index, Depth: depth}
}

type benchHost struct {
	store *badgerstore.Store
	cat   *catalog.Catalog
}

func newBenchHost(tb testing.TB) *benchHost {
	tb.Helper()
	s, err := badgerstore.Open(filepath.Join(tb.TempDir(), "store"), badgerstore.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	return &benchHost{store: s, cat: catalog.New(s)}
}

// captureFiles captures session with the files (path → local file).
func (h *benchHost) captureFiles(tb testing.TB, session string, fs map[string]string) string {
	tb.Helper()
	ctx := context.Background()
	entries := map[string]manifest.Entry{}
	for p, src := range fs {
		entries[p] = putFileFrom(tb, h.store, src)
	}
	root, err := manifest.BuildTree(ctx, h.store, entries)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := h.cat.Head(ctx, session); err != nil {
		if _, err := h.cat.CreateSession(ctx, session, ""); err != nil {
			tb.Fatal(err)
		}
	}
	_, id, err := h.cat.Capture(ctx, session, root, "bench", nil)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// benchRemote is what the sub-benchmarks share.
type benchRemote struct {
	srv     *s3test.Server
	size    int64
	rollout string            // the rollout's local file
	fs      map[string]string // the session's files
	a       *benchHost        // the pushing host
	id      string            // its snapshot
	keyFile string
	seq     int // sessions made by SecondPush
}

// open returns a client for bucket, encrypted (with s3test.TestKey) or
// plain.
func (e *benchRemote) open(b *testing.B, bucket string, encrypted bool) *remote.Remote {
	cfg := remote.Config{Name: "bench", URL: "s3://" + bucket + "/fleet", Endpoint: e.srv.Endpoint}
	if encrypted {
		cfg.Encryption = remote.Encryption{KeyFile: e.keyFile}
	}
	r, err := remote.Open(context.Background(), cfg, remote.Options{Open: remotes3.Open, Credentials: e.srv.Credentials()})
	if err != nil {
		b.Fatal(err)
	}
	return r
}

// BenchmarkRemote runs every figure on a plain remote and again on an
// encrypted one (…Encrypted): what sealing, opening and naming by HMAC
// cost beside the same work in the same run.
func BenchmarkRemote(b *testing.B) {
	ctx := context.Background()
	e := &benchRemote{srv: s3test.Start(b), size: rolloutSize(), keyFile: s3test.WriteKeyFile(b, s3test.TestKey)}
	dir := b.TempDir()
	e.rollout = filepath.Join(dir, "rollout.jsonl")
	writeRollout(b, e.rollout, e.size)
	notes := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(notes, []byte("be nice\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	e.a = newBenchHost(b)
	e.fs = map[string]string{"sessions/rollout.jsonl": e.rollout, "AGENTS.md": notes}
	e.id = e.a.captureFiles(b, "agent", e.fs)

	// The shared buckets the read benchmarks use, one of each kind.
	plainBucket := e.srv.Bucket(b)
	shared := map[bool]*remote.Remote{false: e.open(b, plainBucket, false), true: e.open(b, e.srv.Bucket(b), true)}
	for _, r := range shared {
		if _, err := remote.Push(ctx, e.a.store, e.a.cat, r, e.id, remote.PushOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	// Each plain figure right before its encrypted one: the machine's
	// load drifts less between the two.
	kinds := map[string]bool{"": false, "Encrypted": true}
	for _, suffix := range []string{"", "Encrypted"} {
		b.Run("Push"+suffix, func(b *testing.B) { e.push(b, kinds[suffix]) })
	}
	for _, suffix := range []string{"", "Encrypted"} {
		b.Run("SecondPush"+suffix, func(b *testing.B) { e.secondPush(b, kinds[suffix]) })
	}
	for _, suffix := range []string{"", "Encrypted"} {
		b.Run("TTFB/homefs"+suffix, func(b *testing.B) { e.ttfb(b, shared[kinds[suffix]]) })
	}
	b.Run("TTFB/whole-object", func(b *testing.B) { e.wholeObject(b, plainBucket) })
	for _, suffix := range []string{"", "Encrypted"} {
		b.Run("LazyRead"+suffix, func(b *testing.B) { e.lazyRead(b, shared[kinds[suffix]]) })
	}
}

func (e *benchRemote) push(b *testing.B, encrypted bool) {
	ctx := context.Background()
	b.SetBytes(e.size)
	for range b.N {
		b.StopTimer()
		r := e.open(b, e.srv.Bucket(b), encrypted)
		b.StartTimer()
		res, err := remote.Push(ctx, e.a.store, e.a.cat, r, e.id, remote.PushOptions{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.UploadedBytes)/float64(e.size), "stored/plain")
	}
}

func (e *benchRemote) secondPush(b *testing.B, encrypted bool) {
	ctx := context.Background()
	for range b.N {
		// A session of its own each time, so that no earlier run's
		// snapshot is its parent.
		e.seq++
		session := fmt.Sprintf("second-%d", e.seq)
		b.StopTimer()
		r := e.open(b, e.srv.Bucket(b), encrypted)
		if _, err := remote.Push(ctx, e.a.store, e.a.cat, r, e.id, remote.PushOptions{NoHead: true}); err != nil {
			b.Fatal(err)
		}
		f, err := os.OpenFile(e.rollout, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			b.Fatal(err)
		}
		f.WriteString(`{"seq":-1,"role":"user","text":"one more turn"}` + "\n")
		f.Close()
		e.a.captureFiles(b, session, e.fs)
		before := r.Stats()
		b.StartTimer()
		res, err := remote.Push(ctx, e.a.store, e.a.cat, r, session, remote.PushOptions{NoHead: true})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		after := r.Stats()
		b.ReportMetric(float64(after.BytesOut-before.BytesOut), "bytes-uploaded")
		b.ReportMetric(float64(res.Uploaded), "objects-uploaded")
		b.ReportMetric(float64(after.Heads+after.Lists-before.Heads-before.Lists), "existence-requests")
		if err := os.Truncate(e.rollout, e.size); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

func (e *benchRemote) ttfb(b *testing.B, rs *remote.Remote) {
	needfuse.Require(b)
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		h := newTestHostB(b, rs)
		buf := make([]byte, 4096)
		b.StartTimer()
		start := time.Now()
		pr, err := remote.Pull(ctx, h.rec, h.cat, rs, e.id, remote.PullOptions{})
		if err != nil {
			b.Fatal(err)
		}
		m, err := h.e.MountSnapshot(ctx, e.id, "", b.TempDir(), mountOpts())
		if err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(filepath.Join(m.Dir(), "sessions/rollout.jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(f, buf); err != nil {
			b.Fatal(err)
		}
		ttfb := time.Since(start)
		b.StopTimer()
		f.Close()
		m.Unmount()
		b.ReportMetric(float64(ttfb.Microseconds())/1000, "ms-to-first-4KiB")
		b.ReportMetric(float64(pr.Nodes), "nodes-pulled")
		b.StartTimer()
	}
}

func (e *benchRemote) wholeObject(b *testing.B, bucket string) {
	ctx := context.Background()
	b.StopTimer()
	client := e.srv.Client()
	key := "whole/rollout.jsonl"
	f, err := os.Open(e.rollout)
	if err != nil {
		b.Fatal(err)
	}
	_, err = client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: f, ContentLength: aws.Int64(e.size)},
		func(o *s3.Options) { o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired })
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(e.size)
	b.StartTimer()
	for range b.N {
		start := time.Now()
		out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 4096)
		if _, err := io.ReadFull(out.Body, buf); err != nil {
			b.Fatal(err)
		}
		first := time.Since(start)
		n, err := io.Copy(io.Discard, out.Body)
		out.Body.Close()
		if err != nil || n+4096 != e.size {
			b.Fatalf("download: %d bytes, %v", n+4096, err)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-whole-download")
		b.ReportMetric(float64(first.Microseconds())/1000, "ms-to-first-4KiB")
	}
}

func (e *benchRemote) lazyRead(b *testing.B, rs *remote.Remote) {
	needfuse.Require(b)
	ctx := context.Background()
	b.SetBytes(e.size)
	for range b.N {
		b.StopTimer()
		h := newTestHostB(b, rs)
		if _, err := remote.Pull(ctx, h.rec, h.cat, rs, e.id, remote.PullOptions{}); err != nil {
			b.Fatal(err)
		}
		snap, _, err := h.cat.Snapshot(ctx, e.id)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.rt.Hint(ctx, snap.Root); err != nil {
			b.Fatal(err)
		}
		m, err := h.e.MountSnapshot(ctx, e.id, "", b.TempDir(), mountOpts())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		f, err := os.Open(filepath.Join(m.Dir(), "sessions/rollout.jsonl"))
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, f)
		f.Close()
		if err != nil || n != e.size {
			b.Fatalf("read %d bytes: %v", n, err)
		}
		b.StopTimer()
		st := h.rt.Stats()
		b.ReportMetric(float64(st.Prefetched)/float64(st.Prefetched+st.Fetched), "read-ahead-share")
		m.Unmount()
		b.StartTimer()
	}
}
