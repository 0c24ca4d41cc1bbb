package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// specialTar is an archive with a fifo and a second name of it, a
// character and a block device.
func specialTar(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(1700000000, 5)
	for _, h := range []*tar.Header{
		{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: mt},
		{Name: "dev/loop", Typeflag: tar.TypeBlock, Mode: 0o660, Uid: 0, Gid: 6, Devmajor: 7, Devminor: 300, ModTime: mt},
		{Name: "pipe", Typeflag: tar.TypeFifo, Mode: 0o640, Uid: 1000, Gid: 100, ModTime: mt},
		{Name: "pipe2", Typeflag: tar.TypeLink, Linkname: "pipe", ModTime: mt},
	} {
		h.Format = tar.FormatPAX
		require.NoError(t, tw.WriteHeader(h))
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func readHeaders(t *testing.T, r io.Reader) map[string]*tar.Header {
	t.Helper()
	out := map[string]*tar.Header{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		out[h.Name] = h
	}
}

// TestImportSpecial: fifos are kept, device nodes only when allowed, and
// Export writes them back as they came.
func TestImportSpecial(t *testing.T) {
	ctx := context.Background()
	st := cas.NewMemory()
	_, err := Import(ctx, st, bytes.NewReader(specialTar(t)), ImportOptions{})
	require.ErrorIs(t, err, ErrUnsupported)
	require.Contains(t, err.Error(), `"dev/null" is a device node`)

	res, err := Import(ctx, st, bytes.NewReader(specialTar(t)), ImportOptions{Devices: true})
	require.NoError(t, err)
	require.Equal(t, int64(4), res.Special)
	kinds := map[string]manifest.Entry{}
	require.NoError(t, manifest.Walk(ctx, st, res.Root, func(p string, e *manifest.Entry) error {
		kinds[p] = *e
		return nil
	}))
	require.Equal(t, manifest.KindCharDev, kinds["dev/null"].Kind)
	require.Equal(t, uint32(unix.Mkdev(1, 3)), kinds["dev/null"].Rdev)
	require.Equal(t, manifest.KindBlockDev, kinds["dev/loop"].Kind)
	require.Equal(t, uint32(unix.Mkdev(7, 300)), kinds["dev/loop"].Rdev)
	require.Equal(t, manifest.KindFifo, kinds["pipe"].Kind)
	require.Equal(t, uint32(2), kinds["pipe2"].Nlink)
	require.Equal(t, kinds["pipe"].LinkID, kinds["pipe2"].LinkID)

	var out bytes.Buffer
	require.NoError(t, Export(ctx, st, res.Root, &out, nil))
	hs := readHeaders(t, &out)
	require.Equal(t, byte(tar.TypeChar), hs["dev/null"].Typeflag)
	require.Equal(t, [2]int64{1, 3}, [2]int64{hs["dev/null"].Devmajor, hs["dev/null"].Devminor})
	require.Equal(t, byte(tar.TypeBlock), hs["dev/loop"].Typeflag)
	require.Equal(t, [2]int64{7, 300}, [2]int64{hs["dev/loop"].Devmajor, hs["dev/loop"].Devminor})
	require.Equal(t, 6, hs["dev/loop"].Gid)
	require.Equal(t, byte(tar.TypeFifo), hs["pipe"].Typeflag)
	require.Equal(t, int64(0o640), hs["pipe"].Mode)
	require.Equal(t, 1000, hs["pipe"].Uid)
	require.Equal(t, time.Unix(1700000000, 5), hs["pipe"].ModTime)
	require.Equal(t, byte(tar.TypeLink), hs["pipe2"].Typeflag)
	require.Equal(t, "pipe", hs["pipe2"].Linkname)
}

// TestExportSkipsSockets: a socket entry is left out of the archive, as
// GNU tar leaves one out.
func TestExportSkipsSockets(t *testing.T) {
	ctx := context.Background()
	st := cas.NewMemory()
	root, err := manifest.BuildTree(ctx, st, map[string]manifest.Entry{
		"a":    {Kind: manifest.KindSocket, Mode: 0o755},
		"b":    {Kind: manifest.KindFifo, Mode: 0o600},
		"d/s":  {Kind: manifest.KindSocket, Mode: 0o700},
		"file": {Kind: manifest.KindFile, Mode: 0o644},
	})
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, Export(ctx, st, root, &out, nil))
	hs := readHeaders(t, &out)
	require.Len(t, hs, 3, "%v", hs)
	require.Contains(t, hs, "b")
	require.Contains(t, hs, "d/")
	require.Contains(t, hs, "file")
}

// TestTarDirSpecial: a directory's fifos and device nodes go into the
// stream and its sockets do not; Extract makes them again.
func TestTarDirSpecial(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod of a device needs root")
	}
	ctx := context.Background()
	src := t.TempDir()
	require.NoError(t, unix.Mkfifo(filepath.Join(src, "pipe"), 0o600))
	require.NoError(t, unix.Mknod(filepath.Join(src, "null"), unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3))))
	l, err := net.Listen("unix", filepath.Join(src, "sock"))
	require.NoError(t, err)
	defer l.Close()
	var buf bytes.Buffer
	require.NoError(t, TarDir(ctx, src, &buf, nil))
	hs := readHeaders(t, bytes.NewReader(buf.Bytes()))
	require.Len(t, hs, 2, "%v", hs)
	require.Equal(t, byte(tar.TypeFifo), hs["pipe"].Typeflag)
	require.Equal(t, byte(tar.TypeChar), hs["null"].Typeflag)

	dst := filepath.Join(t.TempDir(), "out")
	require.NoError(t, Extract(ctx, bytes.NewReader(buf.Bytes()), dst, nil))
	var s unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(dst, "pipe"), &s))
	require.Equal(t, uint32(unix.S_IFIFO|0o600), s.Mode)
	require.NoError(t, unix.Lstat(filepath.Join(dst, "null"), &s))
	require.Equal(t, uint32(unix.S_IFCHR|0o600), s.Mode)
	require.Equal(t, unix.Mkdev(1, 3), s.Rdev)
}
