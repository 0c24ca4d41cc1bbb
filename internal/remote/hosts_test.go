package remote_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/remote"
	"github.com/homefs/homefs/internal/remote/s3"
	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/internal/testkit/needfuse"
	"github.com/homefs/homefs/manifest"
)

// testHost is one machine: a Badger store read through the remote, a
// catalog and an Engine over it, as the daemon wires them.
type testHost struct {
	rt  *remote.ReadThrough
	rec *fusefs.Recorder
	cat *catalog.Catalog
	e   *fusefs.Engine
}

func newTestHost(t *testing.T, r *remote.Remote) *testHost { return newTestHostB(t, r) }

func mountOpts() fusefs.MountOptions { return fusefs.MountOptions{} }

func newTestHostB(t testing.TB, r *remote.Remote) *testHost {
	t.Helper()
	dir := t.TempDir()
	store, err := badgerstore.Open(filepath.Join(dir, "store"), badgerstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var remotes []*remote.Remote
	if r != nil {
		remotes = append(remotes, r)
	}
	rt := remote.NewReadThrough(store, remote.ReadThroughOptions{Logger: log}, remotes...)
	rec := fusefs.Record(rt)
	cat := catalog.New(rec)
	e := fusefs.New(rec, cat, fusefs.Options{StoreDir: dir, Logger: log})
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("close engine: %v", err)
		}
		rt.Close()
	})
	return &testHost{rt: rt, rec: rec, cat: cat, e: e}
}

func (h *testHost) mount(t *testing.T, session string) string {
	t.Helper()
	ctx := context.Background()
	if _, err := h.cat.Head(ctx, session); errors.Is(err, catalog.ErrNoSession) {
		if _, err := h.cat.CreateSession(ctx, session, ""); err != nil {
			t.Fatal(err)
		}
	}
	m, err := h.e.Mount(ctx, session, "", t.TempDir(), fusefs.MountOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount() })
	return m.Dir()
}

func (h *testHost) mountSnapshot(t *testing.T, id string) string {
	t.Helper()
	m, err := h.e.MountSnapshot(context.Background(), id, "", t.TempDir(), fusefs.MountOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount() })
	return m.Dir()
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func checkFile(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes differ from the %d written", path, len(got), len(want))
	}
}

func pseudoRandom(seed byte, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// Two hosts on one machine: a session captured and pushed on A is pulled
// lazily on B and mounted, forked and extended there, and B's new turn is
// pushed and pulled back on A.
func TestTwoHosts(t *testing.T) {
	needfuse.Require(t)
	ctx := context.Background()
	srv, bucket, ra, rb := sharedRemotes(t)
	a, b := newTestHost(t, ra), newTestHost(t, rb)

	// Host A: a session with a rollout, captured and pushed.
	rollout := pseudoRandom(1, 40*manifest.ChunkSize+123)
	lost := pseudoRandom(2, 3*manifest.ChunkSize)
	dirA := a.mount(t, "agent")
	writeFile(t, filepath.Join(dirA, "sessions/rollout.jsonl"), rollout)
	writeFile(t, filepath.Join(dirA, "lost.bin"), lost)
	writeFile(t, filepath.Join(dirA, "AGENTS.md"), []byte("be nice\n"))
	_, id, err := a.e.Capture(ctx, "agent", "turn 1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Push(ctx, a.rec, a.cat, ra, "agent", remote.PushOptions{}); err != nil {
		t.Fatal(err)
	}

	// One of A's chunks is then lost on the remote before B reads it.
	if err := os.Remove(srv.ObjectPath(bucket, remote.ChunkKey(ra, cas.Sum(lost[manifest.ChunkSize:2*manifest.ChunkSize])))); err != nil {
		t.Fatal(err)
	}

	// Host B: lazy pull (nodes only) and a read-only mount of the snapshot.
	pr, err := remote.Pull(ctx, b.rec, b.cat, rb, id[:12], remote.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.rt.Hint(ctx, pr.Snapshot.Root); err != nil {
		t.Fatal(err)
	}
	before := b.rt.Stats()
	snapDir := b.mountSnapshot(t, id)
	checkFile(t, filepath.Join(snapDir, "sessions/rollout.jsonl"), rollout)
	checkFile(t, filepath.Join(snapDir, "AGENTS.md"), []byte("be nice\n"))
	st := b.rt.Stats()
	t.Logf("B read the rollout: %d chunks fetched on demand, %d ahead", st.Fetched-before.Fetched, st.Prefetched-before.Prefetched)
	if st.Prefetched == before.Prefetched {
		t.Error("no chunk was read ahead during a sequential read")
	}
	checkLostChunk(t, filepath.Join(snapDir, "lost.bin"))

	// B forks the snapshot, writes a new turn, captures and pushes it.
	if _, err := b.e.Fork(ctx, id, "agent-b"); err != nil {
		t.Fatal(err)
	}
	dirB := b.mount(t, "agent-b")
	turn := append(append([]byte{}, rollout...), []byte(`{"turn":2,"host":"B"}`+"\n")...)
	writeFile(t, filepath.Join(dirB, "sessions/rollout.jsonl"), turn)
	if err := os.Remove(filepath.Join(dirB, "lost.bin")); err != nil {
		t.Fatal(err)
	}
	_, idB, err := b.e.Capture(ctx, "agent-b", "turn 2 on B", nil)
	if err != nil {
		t.Fatal(err)
	}
	pushB, err := remote.Push(ctx, b.rec, b.cat, rb, "agent-b", remote.PushOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("B's turn: %d objects, %d bytes uploaded", pushB.Uploaded, pushB.UploadedBytes)
	if pushB.UploadedBytes > 64<<10 {
		t.Errorf("B's one-line turn uploaded %d bytes", pushB.UploadedBytes)
	}

	checkTurnBackOnA(t, a, ra, id, idB, turn)
}

// checkLostChunk requires the file at path, whose second chunk is lost on
// the remote, to fail with EIO there at the FUSE edge while its first
// chunk still reads.
func checkLostChunk(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatalf("read of an intact chunk: %v", err)
	}
	if _, err := f.ReadAt(buf, manifest.ChunkSize+10); !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of a chunk lost on the remote: %v, want EIO", err)
	}
}

// checkTurnBackOnA pulls B's session agent-b (snapshot idB, forked from
// id) onto A, forks it and reads it through a live mount: the rollout is
// turn and lost.bin, which B removed, is gone.
func checkTurnBackOnA(t *testing.T, a *testHost, ra *remote.Remote, id, idB string, turn []byte) {
	t.Helper()
	ctx := context.Background()
	if _, err := remote.Pull(ctx, a.rec, a.cat, ra, "agent-b", remote.PullOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.e.Fork(ctx, idB, "agent-again"); err != nil {
		t.Fatal(err)
	}
	dirA2 := a.mount(t, "agent-again")
	checkFile(t, filepath.Join(dirA2, "sessions/rollout.jsonl"), turn)
	if _, err := os.Stat(filepath.Join(dirA2, "lost.bin")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lost.bin on A after B removed it: %v", err)
	}
	log, err := a.cat.Log(ctx, "agent-again")
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 2 || log[0].ID != idB || log[1].ID != id {
		t.Fatalf("A's log of the fork: %+v", log)
	}
}

// The daemon's path: a Service over the host's root adds a remote, pushes
// and pulls by name.
func TestService(t *testing.T) {
	ctx := context.Background()
	srv := s3test.Start(t)
	bucket := srv.Bucket(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3test.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3test.SecretKey)
	cfg := remote.Config{Name: "origin", URL: "s3://" + bucket + "/homefs", Endpoint: srv.Endpoint, Encryption: remote.Encryption{KeyFile: s3test.KeyFile(t)}}

	a := newTestHostB(t, nil)
	rootA := t.TempDir()
	svcA, err := remote.NewService(rootA, a.rt, remote.Options{Open: s3.Open})
	if err != nil {
		t.Fatal(err)
	}
	if err := svcA.Add(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := a.cat.CreateSession(ctx, "s", ""); err != nil {
		t.Fatal(err)
	}
	_, id, err := a.e.Capture(ctx, "s", "empty", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svcA.Push(ctx, a.rec, a.cat, "s", "", remote.PushOptions{}); err != nil {
		t.Fatal(err)
	}

	b := newTestHostB(t, nil)
	svcB, err := remote.NewService(rootA, b.rt, remote.Options{Open: s3.Open}) // same remotes.json
	if err != nil {
		t.Fatal(err)
	}
	res, err := svcB.Pull(ctx, b.rec, b.cat, "s", "origin", remote.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.ID != id {
		t.Fatalf("pulled %s, pushed %s", res.ID, id)
	}
	if _, err := svcB.Pull(ctx, b.rec, b.cat, "s", "nope", remote.PullOptions{}); !errors.Is(err, remote.ErrNoRemote) {
		t.Fatalf("pull from an unknown remote: %v", err)
	}
}

// sharedRemotes starts a gateway with one bucket and returns it with two
// clients, one for each host of a two-host test.
func sharedRemotes(t *testing.T) (srv *s3test.Server, bucket string, ra, rb *remote.Remote) {
	t.Helper()
	srv = s3test.Start(t)
	bucket = srv.Bucket(t)
	enc := remote.Encryption{KeyFile: s3test.KeyFile(t)}
	open := func() *remote.Remote {
		r, err := remote.Open(context.Background(), remote.Config{Name: "shared", URL: "s3://" + bucket + "/fleet", Endpoint: srv.Endpoint, Encryption: enc},
			remote.Options{Open: s3.Open, Credentials: srv.Credentials(), MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	return srv, bucket, open(), open()
}
