package fusefs

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSealedStagingFileRemoved: a staging file an fsync named and the end
// of the daemon sealed (immutable) is removed by the next daemon, which
// clears the flag first.
func TestSealedStagingFileRemoved(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("sealing needs CAP_LINUX_IMMUTABLE")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "stage-1")
	f, err := os.Create(p)
	require.NoError(t, err)
	defer f.Close()
	if err := setImmutable(f, true); err != nil {
		t.Skipf("the filesystem under %s has no immutable flag: %v", dir, err)
	}
	_, err = f.Write([]byte("x"))
	require.ErrorIs(t, err, os.ErrPermission, "a sealed file refuses writes through descriptors opened before")
	s := &Session{name: "s", backingDir: dir, log: slog.Default()}
	s.clearBackingDir(nil)
	_, err = os.Stat(p)
	require.ErrorIs(t, err, os.ErrNotExist)
}
