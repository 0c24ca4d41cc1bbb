package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/catalog"
	"github.com/homefs/homefs/internal/testkit/cputest"
	"github.com/homefs/homefs/manifest"
)

// remoteStore is a store whose chosen chunks behave as if only a remote
// had them, as remote.ReadThrough's do: under cas.LocalOnly a Get of one
// answers cas.ErrNotLocal; any other Get of one waits until the test
// releases it (a remote that does not answer), and from then on the
// chunk is local.
type remoteStore struct {
	cas.Store
	waiting chan cas.Ref // a Get that waits for the "remote"

	mu     sync.Mutex
	remote map[cas.Ref]chan struct{} // closed on release; GUARDED_BY(mu)
}

func newRemoteStore() *remoteStore {
	return &remoteStore{Store: cas.NewMemory(), waiting: make(chan cas.Ref, 64), remote: make(map[cas.Ref]chan struct{})}
}

func (s *remoteStore) Get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	s.mu.Lock()
	gate, remote := s.remote[ref]
	s.mu.Unlock()
	if remote {
		if cas.IsLocalOnly(ctx) {
			return nil, fmt.Errorf("chunk %s: %w", ref.Short(), cas.ErrNotLocal)
		}
		select {
		case s.waiting <- ref:
		default:
		}
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return s.Store.Get(ctx, ref)
}

// makeRemote makes ref one that only the "remote" has.
func (s *remoteStore) makeRemote(ref cas.Ref) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remote[ref] = make(chan struct{})
}

// release lets the Gets of ref that wait go on; ref is local from then on.
func (s *remoteStore) release(ref cas.Ref) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gate, ok := s.remote[ref]; ok {
		close(gate)
		delete(s.remote, ref)
	}
}

func (s *remoteStore) releaseAll() {
	s.mu.Lock()
	refs := make([]cas.Ref, 0, len(s.remote))
	for ref := range s.remote {
		refs = append(refs, ref)
	}
	s.mu.Unlock()
	for _, ref := range refs {
		s.release(ref)
	}
}

// stuckLimit is far longer than any local operation takes, even under
// -race on a loaded host: one that has not ended by then waits for the
// "remote".
const stuckLimit = 30 * time.Second

// TestRemoteReadHoldsNothingElse: while a read waits for a chunk that
// only a remote has, stat, ls -l and reads of local files on the same
// mount, from every CPU (so on every FUSE ring when the mount is served
// over io_uring), stat of the very file being read included, complete;
// once the remote answers, the read returns the right bytes.
func TestRemoteReadHoldsNothingElse(t *testing.T) {
	ctx := context.Background()
	cpus := cputest.Usable(t)
	store := newRemoteStore()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	remote := func(c int) string { return fmt.Sprintf("remote-%d.bin", c) }
	content := func(c int) []byte { return randBytes(uint64(c), remoteSize) }
	local := func(c, x int) string { return fmt.Sprintf("local-%d-%d.txt", c, x) }

	// The session's files, stored, then a fresh engine: nothing of them in
	// a cache, and the chunks of remote-* on the "remote" alone.
	e1 := New(store, catalog.New(store), Options{StoreDir: t.TempDir(), Logger: log})
	_, err := e1.Catalog().CreateSession(ctx, "s", "")
	require.NoError(t, err)
	m1, err := e1.Mount(ctx, "s", "", t.TempDir(), MountOptions{})
	require.NoError(t, err)
	for _, c := range cpus {
		require.NoError(t, os.WriteFile(filepath.Join(m1.Dir(), remote(c)), content(c), 0o644))
		for _, x := range cpus {
			write(t, filepath.Join(m1.Dir(), local(c, x)), local(c, x))
		}
	}
	require.NoError(t, e1.Close(ctx))
	for _, c := range cpus {
		for _, ref := range chunksOf(content(c)) {
			store.makeRemote(ref)
		}
	}
	e := NewTestEngine(t, store)
	m := MountForTest(t, e, "s", "", MountOptions{})
	t.Cleanup(store.releaseAll) // before the unmount: a stuck read holds it
	t.Logf("transport: %s, CPUs %v", m.Transport(), cpus)

	for _, c := range cpus {
		want := content(c)
		var got []byte
		read := cputest.On(c, func() (err error) {
			got, err = os.ReadFile(filepath.Join(m.Dir(), remote(c)))
			return err
		})
		for asked := false; !asked; {
			select {
			case ref := <-store.waiting:
				asked = slices.Contains(chunksOf(want), ref)
			case err := <-read:
				t.Fatalf("the read of %s on CPU %d ended (%v) without waiting for the remote", remote(c), c, err)
			case <-time.After(stuckLimit):
				t.Fatalf("the read of %s on CPU %d never asked the remote", remote(c), c)
			}
		}
		for _, x := range cpus {
			done := cputest.On(x, func() error { return localOps(m.Dir(), remote(c), local(c, x)) })
			select {
			case err := <-done:
				require.NoError(t, err, "CPU %d", x)
			case <-time.After(stuckLimit):
				t.Fatalf("stat, ls or a local read on CPU %d stuck while a read on CPU %d waits for the remote", x, c)
			}
		}
		select {
		case err := <-read:
			t.Fatalf("the read of %s ended (%v) before the remote answered", remote(c), err)
		default:
		}
		for _, ref := range chunksOf(want) {
			store.release(ref)
		}
		require.NoError(t, <-read)
		require.True(t, bytes.Equal(want, got), "the read of %s after the remote answered returned the wrong bytes", remote(c))
	}
}

// remoteSize is the size of the files whose chunks only the "remote" has:
// several chunks, the last one short.
const remoteSize = 5*manifest.ChunkSize - 100

// chunksOf returns the refs of b's chunks.
func chunksOf(b []byte) []cas.Ref {
	var refs []cas.Ref
	for off := 0; off < len(b); off += manifest.ChunkSize {
		refs = append(refs, cas.Sum(b[off:min(off+manifest.ChunkSize, len(b))]))
	}
	return refs
}

// localOps stats the file being read, lists the directory as ls -l does
// and reads a local file that no one read before (so that the read
// reaches the daemon), checking what it got.
func localOps(dir, reading, name string) error {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, reading), &st); err != nil {
		return err
	}
	if st.Size != remoteSize {
		return fmt.Errorf("stat %s: size %d", reading, st.Size)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if _, err := ent.Info(); err != nil {
			return err
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return err
	}
	if string(b) != name {
		return fmt.Errorf("read %s: %q", name, b)
	}
	return nil
}
