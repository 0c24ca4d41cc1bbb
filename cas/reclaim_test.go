package cas

import (
	"context"
	"crypto/rand"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReclaimKeepsLiveChunks(t *testing.T) {
	ctx := context.Background()
	s, err := OpenBadger(t.TempDir(), BadgerOptions{ValueLogFileSize: 17 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	var keep, drop []Ref
	for i := 0; i < 800; i++ {
		b := make([]byte, 64<<10)
		_, _ = rand.Read(b)
		r, err := s.Put(ctx, b)
		require.NoError(t, err)
		if i%4 == 0 {
			keep = append(keep, r)
		} else {
			drop = append(drop, r)
		}
	}
	require.NoError(t, s.Sync(ctx))
	require.NoError(t, s.Delete(ctx, drop...))
	rewritten, err := s.Reclaim(ctx, 0.5)
	require.NoError(t, err)
	require.Positive(t, rewritten, "three quarters of the value log is deleted: some file must be rewritten")
	for _, r := range keep {
		b, err := s.Get(ctx, r)
		require.NoError(t, err)
		require.Equal(t, r, Sum(b))
	}
	has, err := s.HasMany(ctx, drop[:10])
	require.NoError(t, err)
	for _, h := range has {
		require.False(t, h)
	}
}
