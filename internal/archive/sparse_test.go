package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
)

// paxTar is an archive of one regular file named name whose PAX header
// holds recs, with data as the entry's bytes in the stream. archive/tar's
// Writer drops GNU.sparse records, so the PAX header is written as a
// plain file's and then retyped.
func paxTar(t testing.TB, name string, recs map[string]string, data []byte) []byte {
	t.Helper()
	var pax []byte
	for _, k := range slices.Sorted(maps.Keys(recs)) {
		rec := " " + k + "=" + recs[k] + "\n"
		n := len(rec) + 1
		for len(strconv.Itoa(n))+len(rec) != n {
			n = len(strconv.Itoa(n)) + len(rec)
		}
		pax = append(pax, strconv.Itoa(n)+rec...)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write := func(h *tar.Header, body []byte) {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	write(&tar.Header{Name: "PaxHeaders/" + name, Typeflag: tar.TypeReg, Size: int64(len(pax)), Format: tar.FormatUSTAR}, pax)
	write(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), Format: tar.FormatUSTAR}, data)
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	b[156] = tar.TypeXHeader
	copy(b[148:156], "        ") // the checksum counts its own field as spaces
	sum := 0
	for _, c := range b[:512] {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// sparseClaim is a crafted archive of about 3 KB whose one file, "holes",
// claims size bytes: one data byte, and a hole for the rest (GNU sparse
// 0.1), as FuzzImport found it.
func sparseClaim(t testing.TB, size int64) []byte {
	return paxTar(t, "holes", map[string]string{
		"GNU.sparse.major":     "0",
		"GNU.sparse.minor":     "1",
		"GNU.sparse.size":      strconv.FormatInt(size, 10),
		"GNU.sparse.numblocks": "1",
		"GNU.sparse.map":       "0,1",
	}, []byte("x"))
}

// sparseArchives are the crafted sparse archives and those GNU tar made
// with --sparse (testdata/mksparse.sh: a 2 GiB file with 4 KiB of data at
// each end). The file of each is named "holes".
func sparseArchives(t *testing.T) map[string][]byte {
	archives := map[string][]byte{
		"claims 2^63-1 bytes": sparseClaim(t, 1<<63-1),
		"claims 4 GiB":        sparseClaim(t, 4<<30),
	}
	for _, f := range []string{"sparse-gnu.tar", "sparse-pax1.0.tar", "sparse-pax0.1.tar", "sparse-pax0.0.tar"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		require.NoError(t, err)
		archives[f] = b
	}
	return archives
}

// TestImportRefusesSparse: a sparse file is refused, naming it, before its
// content is read: a crafted claim of 2^63 bytes ends at once, and so does
// a legitimate archive made by tar --sparse.
func TestImportRefusesSparse(t *testing.T) {
	for name, data := range sparseArchives(t) {
		t.Run(name, func(t *testing.T) {
			_, err := Import(context.Background(), cas.NewMemory(), bytes.NewReader(data), ImportOptions{})
			require.ErrorIs(t, err, ErrUnsupported)
			require.ErrorContains(t, err, `"holes" is a sparse file`)
		})
	}
}

// TestExtractRefusesSparse: Extract refuses a sparse file as Import does,
// and writes nothing of it.
func TestExtractRefusesSparse(t *testing.T) {
	for name, data := range sparseArchives(t) {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "out")
			err := Extract(context.Background(), bytes.NewReader(data), dst, nil)
			require.ErrorIs(t, err, ErrUnsupported)
			require.ErrorContains(t, err, `"holes" is a sparse file`)
			ents, err := os.ReadDir(dst)
			require.NoError(t, err)
			require.Empty(t, ents)
		})
	}
}

// TestImportMaxFileSize: a file over MaxFileSize is refused by its header,
// before any of its content is read; one of MaxFileSize is read (and here
// found truncated).
func TestImportMaxFileSize(t *testing.T) {
	header := func(size int64) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}))
		return append(buf.Bytes(), bytes.Repeat([]byte("x"), 1024)...)
	}
	_, err := Import(context.Background(), cas.NewMemory(), bytes.NewReader(header(MaxFileSize+1)), ImportOptions{})
	require.ErrorIs(t, err, ErrUnsupported)
	require.ErrorContains(t, err, `"big": 68719476737 bytes, over the 64 GiB a homefs file holds`)

	_, err = Import(context.Background(), cas.NewMemory(), bytes.NewReader(header(MaxFileSize)), ImportOptions{})
	require.ErrorIs(t, err, ErrMalformed)
}
