package fusefs

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
)

// TestSpillCanceled: a write whose request is interrupted (the kernel
// sends FUSE_INTERRUPT when the writer gets a signal, and Go's runtime
// signals its threads all the time) while it spills buffered chunks must
// not lose bytes of earlier, acknowledged writes.
func TestSpillCanceled(t *testing.T) {
	t.Parallel()
	e := NewTestEngine(t, nil)
	ctx := context.Background()
	s, n := liveFile(t, e, "f")
	var err error
	data := randBytes(41, spillThreshold-100)
	_, err = s.Write(ctx, n, data, 0, WriteOp{})
	require.NoError(t, err)
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	more := randBytes(42, 1<<20)
	if _, err := s.Write(canceled, n, more, int64(len(data)), WriteOp{}); err == nil {
		data = append(data, more...)
	}
	got := make([]byte, len(data))
	k, err := s.Read(ctx, n, got, 0)
	require.NoError(t, err, "the acknowledged bytes are still there")
	require.Equal(t, len(data), k)
	require.True(t, bytes.Equal(data, got))

	// The same for a flush (an interrupted fsync) of buffered files.
	small, err := s.Create(ctx, s.root, "small", 0o644, Owner{})
	require.NoError(t, err)
	_, err = s.Write(ctx, small, []byte("buffered"), 0, WriteOp{})
	require.NoError(t, err)
	_ = e.Sync(canceled, "s")
	got = make([]byte, 8)
	_, err = s.Read(ctx, small, got, 0)
	require.NoError(t, err)
	require.Equal(t, "buffered", string(got))

	fm := forkMount(t, e, "s", "after")
	require.Equal(t, "buffered", read(t, filepath.Join(fm.Dir(), "small")))
	all, err := os.ReadFile(filepath.Join(fm.Dir(), "f"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, all))
}

// failingStore fails the commits of batches while fail is set.
type failingStore struct {
	cas.Store
	fail atomic.Bool
}

func (s *failingStore) NewBatch() cas.Batch { return &failingBatch{Batch: s.Store.NewBatch(), s: s} }

type failingBatch struct {
	cas.Batch
	s *failingStore
}

func (b *failingBatch) Commit(ctx context.Context, durable bool) error {
	if b.s.fail.Load() {
		return errors.New("injected commit failure")
	}
	return b.Batch.Commit(ctx, durable)
}

// TestSpillCommitFails: a spill or flush whose commit fails reports the
// error but keeps its chunks; once the store works again the next flush
// stores them, so nothing written is lost.
func TestSpillCommitFails(t *testing.T) {
	t.Parallel()
	store := &failingStore{Store: cas.NewMemory()}
	e := NewTestEngine(t, store)
	ctx := context.Background()
	s, n := liveFile(t, e, "f")
	var err error
	store.fail.Store(true)
	data := randBytes(43, 3*spillThreshold)
	failed := 0
	for off := 0; off < len(data); off += 1 << 20 {
		if _, err := s.Write(ctx, n, data[off:off+1<<20], int64(off), WriteOp{}); err != nil {
			failed++ // the spill's commit; the bytes are in the file all the same
		}
	}
	require.NotZero(t, failed, "spills ran into the broken store")
	got := make([]byte, len(data))
	_, err = s.Read(ctx, n, got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "the chunks of failed commits are still readable")
	require.Error(t, e.Sync(ctx, "s"), "a flush into the broken store fails")
	_, err = s.Read(ctx, n, got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "and so are those of the failed flush")

	store.fail.Store(false)
	require.NoError(t, e.Sync(ctx, "s"))
	s.pending.mu.Lock()
	held := len(s.pending.m)
	s.pending.mu.Unlock()
	require.Zero(t, held, "once stored, nothing is held in memory")
	fm := forkMount(t, e, "s", "after")
	all, err := os.ReadFile(filepath.Join(fm.Dir(), "f"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, all), "the stored file holds every byte")
}

// liveFile creates session "s" on e and an empty file name in it, and
// returns the live session and the file's node.
func liveFile(t *testing.T, e *Engine, name string) (*Session, *node) {
	t.Helper()
	ctx := context.Background()
	_, err := e.Catalog().CreateSession(ctx, "s", "")
	require.NoError(t, err)
	s, err := e.live(ctx, "s")
	require.NoError(t, err)
	n, err := s.Create(ctx, s.root, name, 0o644, Owner{})
	require.NoError(t, err)
	return s, n
}
