package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/internal/archive"
	"github.com/homefs/homefs/internal/fsck"
)

// verifySnapshot runs the fsck verifier over snapshot id and exports it
// whole, as `homefs fsck` and `homefs export` would: both must find
// nothing wrong. v carries what earlier calls verified.
func verifySnapshot(t *testing.T, e *Engine, v *fsck.Verifier, id string) {
	t.Helper()
	ctx := context.Background()
	snap, _, err := e.cat.Snapshot(ctx, id)
	require.NoError(t, err)
	problems, err := v.Tree(ctx, "snapshot "+id, snap.Root)
	require.NoError(t, err)
	require.Empty(t, problems, "fsck of snapshot %s", id)
	require.NoError(t, archive.Export(ctx, e.store, snap.Root, io.Discard, nil), "export of snapshot %s", id)
}

// TestGrowPastStoredShortChunk: a file whose short last chunk was stored
// (by a capture, an fsync or the periodic flush) and which then grows
// (truncate up, pwrite past EOF, fallocate) stores that chunk again at
// its new length, so that its snapshots pass fsck and export; until then
// the stored 18928-byte chunk 2 of a 150000-byte file stayed in the
// grown file's entry ("chunk 2: 18928 bytes, want 65536").
func TestGrowPastStoredShortChunk(t *testing.T) {
	t.Parallel()
	needStaging(t)
	e, m := newMount(t)
	ctx := context.Background()
	s, err := e.live(ctx, "s")
	require.NoError(t, err)
	v := fsck.NewVerifier(e.store)
	const size, grown = 150000, 262144
	first := randBytes(41, size)

	stores := map[string]func(t *testing.T, f *os.File){
		"capture": func(t *testing.T, _ *os.File) {
			_, _, err := e.Capture(ctx, "s", "short tail", nil)
			require.NoError(t, err)
		},
		"fsync": func(t *testing.T, f *os.File) { require.NoError(t, f.Sync()) },
		"periodic flush": func(t *testing.T, _ *os.File) {
			require.NoError(t, e.syncPartial(ctx, s))
		},
	}
	grows := map[string]func(t *testing.T, f *os.File, want []byte) []byte{
		"truncate": func(t *testing.T, f *os.File, want []byte) []byte {
			require.NoError(t, f.Truncate(grown))
			return append(want, make([]byte, grown-len(want))...)
		},
		"pwrite past EOF": func(t *testing.T, f *os.File, want []byte) []byte {
			_, err := f.WriteAt([]byte("past"), grown-4)
			require.NoError(t, err)
			want = append(want, make([]byte, grown-len(want))...)
			copy(want[grown-4:], "past")
			return want
		},
		"pwrite past EOF in the chunk": func(t *testing.T, f *os.File, want []byte) []byte {
			_, err := f.WriteAt([]byte("past"), size+1000)
			require.NoError(t, err)
			want = append(want, make([]byte, 1004)...)
			copy(want[size+1000:], "past")
			return want
		},
		"fallocate": func(t *testing.T, f *os.File, want []byte) []byte {
			require.NoError(t, unix.Fallocate(int(f.Fd()), 0, 0, grown))
			return append(want, make([]byte, grown-len(want))...)
		},
	}
	for _, writer := range []string{"daemon", "staged"} {
		for sname, store := range stores {
			for gname, grow := range grows {
				name := fmt.Sprintf("%s/%s/%s", writer, sname, gname)
				t.Run(name, func(t *testing.T) {
					p := filepath.Join(m.Dir(), fmt.Sprintf("%s-%s-%s", writer, sname, gname))
					if writer == "staged" {
						// A new file written O_WRONLY is staged; the grow
						// below goes through the daemon.
						w, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
						require.NoError(t, err)
						_, err = w.Write(first)
						require.NoError(t, err)
						store(t, w)
						require.NoError(t, w.Close())
					} else {
						write(t, p, "")
					}
					f, err := os.OpenFile(p, os.O_RDWR, 0)
					require.NoError(t, err)
					defer f.Close()
					if writer == "daemon" {
						_, err = f.Write(first)
						require.NoError(t, err)
						store(t, f)
					}
					want := grow(t, f, bytes.Clone(first))
					id, dir := captureMount(t, e, "s")
					verifySnapshot(t, e, v, id)
					got, err := os.ReadFile(filepath.Join(dir, filepath.Base(p)))
					require.NoError(t, err)
					require.True(t, bytes.Equal(want, got), "snapshot holds %d bytes, want %d", len(got), len(want))
					got, err = os.ReadFile(p)
					require.NoError(t, err)
					require.True(t, bytes.Equal(want, got), "mount holds %d bytes, want %d", len(got), len(want))
				})
			}
		}
	}
	// The session's head too, as fsck checks it.
	require.NoError(t, e.Sync(ctx, "s"))
	rep, err := fsck.Check(ctx, e.store, e.cat, nil)
	require.NoError(t, err)
	require.Empty(t, rep.Problems)
}
