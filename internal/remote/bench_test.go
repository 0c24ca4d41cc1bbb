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

	"homefs/cas"
	"homefs/internal/catalog"
	"homefs/internal/remote"
	"homefs/internal/remote/s3test"
	"homefs/manifest"
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
	store *cas.BadgerStore
	cat   *catalog.Catalog
}

func newBenchHost(tb testing.TB) *benchHost {
	tb.Helper()
	s, err := cas.OpenBadger(filepath.Join(tb.TempDir(), "store"), cas.BadgerOptions{})
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

func BenchmarkRemote(b *testing.B) {
	ctx := context.Background()
	srv := s3test.Start(b)
	size := rolloutSize()
	dir := b.TempDir()
	rolloutPath := filepath.Join(dir, "rollout.jsonl")
	writeRollout(b, rolloutPath, size)
	notes := filepath.Join(dir, "AGENTS.md")
	if err := os.WriteFile(notes, []byte("be nice\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	open := func(bucket string) *remote.Remote {
		r, err := remote.Open(ctx, remote.Config{Name: "bench", URL: "s3://" + bucket + "/fleet", Endpoint: srv.Endpoint},
			remote.Options{Credentials: srv.Credentials()})
		if err != nil {
			b.Fatal(err)
		}
		return r
	}
	a := newBenchHost(b)
	fs := map[string]string{"sessions/rollout.jsonl": rolloutPath, "AGENTS.md": notes}
	id := a.captureFiles(b, "agent", fs)

	// The shared bucket the read benchmarks use.
	shared := srv.Bucket(b)
	rs := open(shared)
	if _, err := remote.Push(ctx, a.store, a.cat, rs, id, remote.PushOptions{}); err != nil {
		b.Fatal(err)
	}

	b.Run("Push", func(b *testing.B) {
		b.SetBytes(size)
		for range b.N {
			b.StopTimer()
			r := open(srv.Bucket(b))
			b.StartTimer()
			res, err := remote.Push(ctx, a.store, a.cat, r, id, remote.PushOptions{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(res.UploadedBytes)/float64(size), "stored/plain")
		}
	})

	b.Run("SecondPush", func(b *testing.B) {
		for range b.N {
			b.StopTimer()
			r := open(srv.Bucket(b))
			if _, err := remote.Push(ctx, a.store, a.cat, r, id, remote.PushOptions{NoHead: true}); err != nil {
				b.Fatal(err)
			}
			f, err := os.OpenFile(rolloutPath, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				b.Fatal(err)
			}
			f.WriteString(`{"seq":-1,"role":"user","text":"one more turn"}` + "\n")
			f.Close()
			a.captureFiles(b, "agent2", fs)
			before := r.Stats()
			b.StartTimer()
			res, err := remote.Push(ctx, a.store, a.cat, r, "agent2", remote.PushOptions{NoHead: true})
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			after := r.Stats()
			b.ReportMetric(float64(after.BytesOut-before.BytesOut), "bytes-uploaded")
			b.ReportMetric(float64(res.Uploaded), "objects-uploaded")
			b.ReportMetric(float64(after.Heads+after.Lists-before.Heads-before.Lists), "existence-requests")
			if err := os.Truncate(rolloutPath, size); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})

	b.Run("TTFB/homefs", func(b *testing.B) {
		if os.Getuid() != 0 {
			b.Skip("FUSE mounts need root")
		}
		for range b.N {
			b.StopTimer()
			h := newTestHostB(b, rs)
			buf := make([]byte, 4096)
			b.StartTimer()
			start := time.Now()
			pr, err := remote.Pull(ctx, h.rec, h.cat, rs, id, remote.PullOptions{})
			if err != nil {
				b.Fatal(err)
			}
			m, err := h.e.MountSnapshot(ctx, id, "", b.TempDir(), mountOpts())
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
	})

	b.Run("TTFB/whole-object", func(b *testing.B) {
		b.StopTimer()
		client := srv.Client()
		key := "whole/rollout.jsonl"
		f, err := os.Open(rolloutPath)
		if err != nil {
			b.Fatal(err)
		}
		_, err = client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(shared), Key: aws.String(key), Body: f, ContentLength: aws.Int64(size)},
			func(o *s3.Options) { o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired })
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(size)
		b.StartTimer()
		for range b.N {
			start := time.Now()
			out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(shared), Key: aws.String(key)})
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
			if err != nil || n+4096 != size {
				b.Fatalf("download: %d bytes, %v", n+4096, err)
			}
			b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-whole-download")
			b.ReportMetric(float64(first.Microseconds())/1000, "ms-to-first-4KiB")
		}
	})

	b.Run("LazyRead", func(b *testing.B) {
		if os.Getuid() != 0 {
			b.Skip("FUSE mounts need root")
		}
		b.SetBytes(size)
		for range b.N {
			b.StopTimer()
			h := newTestHostB(b, rs)
			if _, err := remote.Pull(ctx, h.rec, h.cat, rs, id, remote.PullOptions{}); err != nil {
				b.Fatal(err)
			}
			snap, _, err := h.cat.Snapshot(ctx, id)
			if err != nil {
				b.Fatal(err)
			}
			if err := h.rt.Hint(ctx, snap.Root); err != nil {
				b.Fatal(err)
			}
			m, err := h.e.MountSnapshot(ctx, id, "", b.TempDir(), mountOpts())
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
			if err != nil || n != size {
				b.Fatalf("read %d bytes: %v", n, err)
			}
			b.StopTimer()
			st := h.rt.Stats()
			b.ReportMetric(float64(st.Prefetched)/float64(st.Prefetched+st.Fetched), "read-ahead-share")
			m.Unmount()
			b.StartTimer()
		}
	})
}
