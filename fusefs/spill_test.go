package fusefs

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpillCanceled: a write whose request is interrupted (the kernel
// sends FUSE_INTERRUPT when the writer gets a signal, and Go's runtime
// signals its threads all the time) while it spills buffered chunks must
// not lose bytes of earlier, acknowledged writes.
func TestSpillCanceled(t *testing.T) {
	t.Parallel()
	e := NewTestEngine(t, nil)
	ctx := context.Background()
	_, err := e.Catalog().CreateSession(ctx, "s", "")
	require.NoError(t, err)
	s, err := e.live(ctx, "s")
	require.NoError(t, err)
	n, err := s.Create(ctx, s.root, "f", 0o644, Owner{})
	require.NoError(t, err)
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
