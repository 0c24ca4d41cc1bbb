package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"testing"

	"github.com/homefs/homefs/cas"
)

// BenchmarkImportHoles imports a 64 MiB file of zeros, as an archive made
// without --sparse holds a sparse file's holes: every chunk is checked
// for zeros and stored as a hole.
func BenchmarkImportHoles(b *testing.B) {
	const size = 64 << 20
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "holes", Typeflag: tar.TypeReg, Mode: 0o644, Size: size}); err != nil {
		b.Fatal(err)
	}
	if _, err := tw.Write(make([]byte, size)); err != nil {
		b.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	data := buf.Bytes()
	b.SetBytes(size)
	for b.Loop() {
		if _, err := Import(context.Background(), cas.NewMemory(), bytes.NewReader(data), ImportOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}
