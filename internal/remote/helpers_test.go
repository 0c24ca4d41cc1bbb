package remote

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/manifest"
)

// host is one machine's local side: a Badger store and its catalog.
type host struct {
	dir   string
	store *badgerstore.Store
	cat   *catalog.Catalog
}

func newHost(t testing.TB) *host {
	t.Helper()
	dir := t.TempDir()
	s, err := badgerstore.Open(filepath.Join(dir, "store"), badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return &host{dir: dir, store: s, cat: catalog.New(s)}
}

func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// openRemote returns a client for a new bucket (prefix "p") on srv, with
// few, quick retries so fault tests end fast; encrypted with
// s3test.TestKey when s3test.Encrypted.
func openRemote(t testing.TB, srv *s3test.Server, bucket string) *Remote {
	t.Helper()
	r, err := Open(context.Background(), Config{
		Name: "test", URL: "s3://" + bucket + "/p", Endpoint: srv.Endpoint,
		Encryption: Encryption{KeyFile: s3test.KeyFile(t)},
	}, Options{Open: s3.Open, Credentials: srv.Credentials(), MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// putFile stores content as a file entry (chunks, an index when large).
func putFile(t testing.TB, p cas.Putter, content []byte) manifest.Entry {
	t.Helper()
	ctx := context.Background()
	cl := manifest.NewChunkList()
	for i := 0; i*manifest.ChunkSize < len(content); i++ {
		end := min((i+1)*manifest.ChunkSize, len(content))
		ref, err := p.Put(ctx, content[i*manifest.ChunkSize:end])
		if err != nil {
			t.Fatal(err)
		}
		cl.Set(i, ref)
	}
	chunks, index, depth, err := cl.Store(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	return manifest.Entry{Kind: manifest.KindFile, Mode: 0o644, Size: int64(len(content)),
		MtimeNs: 1e18, CtimeNs: 1e18, Chunks: chunks, Index: index, Depth: depth}
}

// randomBytes returns n bytes from a fixed seed.
func randomBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 42))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// files is a session's content by path.
type files map[string][]byte

// capture builds a tree of fs on h, points session at it (creating it) and
// captures it, returning the snapshot id.
func (h *host) capture(t testing.TB, session string, fs files) string {
	t.Helper()
	ctx := context.Background()
	entries := make(map[string]manifest.Entry, len(fs))
	for p, c := range fs {
		entries[p] = putFile(t, h.store, c)
	}
	root, err := manifest.BuildTree(ctx, h.store, entries)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.cat.Head(ctx, session); err != nil {
		if _, err := h.cat.CreateSession(ctx, session, ""); err != nil {
			t.Fatal(err)
		}
	}
	_, id, err := h.cat.Capture(ctx, session, root, "turn", nil)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// readFiles returns the content of every file of snapshot id through g.
func readFiles(t testing.TB, g cas.Getter, cat *catalog.Catalog, id string) (files, error) {
	t.Helper()
	ctx := context.Background()
	snap, _, err := cat.Snapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	out := files{}
	err = manifest.Walk(ctx, g, snap.Root, func(path string, e *manifest.Entry) error {
		if e.Kind != manifest.KindFile {
			return nil
		}
		cl, err := manifest.LoadChunkList(ctx, g, e)
		if err != nil {
			return err
		}
		var b []byte
		for i := 0; i < cl.Len(); i++ {
			data, err := g.Get(ctx, cl.At(i))
			if err != nil {
				return fmt.Errorf("%s chunk %d: %w", path, i, err)
			}
			b = append(b, data...)
		}
		out[path] = b
		return nil
	})
	return out, err
}

func sampleFiles() files {
	fs := files{
		"rollout.jsonl":       randomBytes(1, 3*manifest.ChunkSize+100),
		"notes/a.txt":         []byte("hello from host A\n"),
		"notes/deep/b.txt":    []byte("deep\n"),
		"big/index-file.bin":  randomBytes(2, 300*manifest.ChunkSize), // index node
		"empty-dir-file.txt":  {},
		"src/main.go":         []byte("package main\n"),
		"src/internal/x.go":   []byte("package internal\n"),
		"src/internal/y.go":   []byte("package internal // y\n"),
		"src/internal/z/z.go": []byte("package z\n"),
	}
	return fs
}
