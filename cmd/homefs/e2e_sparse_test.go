package main

import (
	"archive/tar"
	"bytes"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestImportRefusesSparseAndHugeCLI: import refuses a sparse file made by
// tar --sparse and a file over 64 GiB with a usage error naming the
// entry, before reading its content, and creates no session.
func TestImportRefusesSparseAndHugeCLI(t *testing.T) {
	e := newEnv(t)
	e.start()
	// testdata/mksparse.sh made these with GNU tar: a 2 GiB file with 4 KiB
	// of data at each end.
	for _, f := range []string{"sparse-gnu.tar", "sparse-pax1.0.tar"} {
		r := e.run("import", filepath.Join("..", "..", "internal", "archive", "testdata", f), "sparse")
		require.Equal(t, exitUsage, r.code, r.stderr)
		require.Contains(t, r.stderr, `"holes" is a sparse file`)
		require.Contains(t, r.stderr, "without --sparse")
		e.fails(exitNotFound, "no such session", "log", "sparse")
	}

	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "small", Typeflag: tar.TypeReg, Mode: 0o644, Size: 2}))
	_, err := tw.Write([]byte("ok"))
	require.NoError(t, err)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Mode: 0o644, Size: 64<<30 + 1}))
	// The stream ends there: the header alone is refused.
	r := e.runStdin(buf.Bytes(), "import", "-", "huge")
	require.Equal(t, exitUsage, r.code, r.stderr)
	require.Contains(t, r.stderr, `"huge": 68719476737 bytes, over the 64 GiB a homefs file holds`)
	e.fails(exitNotFound, "no such session", "log", "huge")
}
