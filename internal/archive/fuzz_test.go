package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"homefs/cas"
	"homefs/manifest"
)

// seedTar builds a small archive for the fuzz corpus.
func seedTar(f *testing.F, entries []tar.Header, body string) []byte {
	f.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			f.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(body)); err != nil {
				f.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		f.Fatal(err)
	}
	return buf.Bytes()
}

// FuzzImport feeds arbitrary bytes to Import: it must never panic, never
// accept a tree with an invalid path or a symlink leaving the tree, and
// what it accepts must export and import again to the same root.
func FuzzImport(f *testing.F) {
	f.Add(seedTar(f, []tar.Header{
		{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "d/f", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "d/l", Typeflag: tar.TypeSymlink, Linkname: "f"},
		{Name: "d/h", Typeflag: tar.TypeLink, Linkname: "d/f"},
	}, "hello\n"))
	f.Add(seedTar(f, []tar.Header{
		{Name: "./", Typeflag: tar.TypeDir, Mode: 0o2770, Uid: 1000},
		{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644},
		{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "f"},
		{Name: "l2", Typeflag: tar.TypeLink, Linkname: "l"},
		{Name: "l3", Typeflag: tar.TypeLink, Linkname: "l2"},
		{Name: "l", Typeflag: tar.TypeReg, Mode: 0o600},
	}, "hello\n"))
	f.Add(seedTar(f, []tar.Header{{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o644}}, "x"))
	f.Add(seedTar(f, []tar.Header{{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "../../etc/passwd"}}, ""))
	f.Add(seedTar(f, []tar.Header{
		{Name: "null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3},
		{Name: "sda", Typeflag: tar.TypeBlock, Mode: 0o660, Devmajor: 8, Devminor: 1 << 19},
		{Name: "p", Typeflag: tar.TypeFifo, Mode: 0o600},
		{Name: "p2", Typeflag: tar.TypeLink, Linkname: "p"},
	}, ""))
	f.Add([]byte("not a tar stream"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		store := cas.NewMemory()
		res, err := Import(ctx, store, bytes.NewReader(data), ImportOptions{Devices: true})
		if err != nil {
			if !errors.Is(err, ErrUnsafe) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrUnsupported) && !errors.Is(err, manifest.ErrInvalid) {
				// Any refusal is fine, but it must say why in a class the
				// daemon maps to a usage error.
				if !strings.Contains(err.Error(), "archive") {
					t.Fatalf("unclassified error: %v", err)
				}
			}
			return
		}
		err = manifest.Walk(ctx, store, res.Root, func(p string, e *manifest.Entry) error {
			if err := manifest.ValidatePath(p); err != nil {
				t.Fatalf("accepted path %q: %v", p, err)
			}
			if e.Kind == manifest.KindSymlink {
				if err := checkTarget(p, e.Target); err != nil {
					t.Fatalf("accepted symlink %q → %q: %v", p, e.Target, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk accepted tree: %v", err)
		}
		var out bytes.Buffer
		if err := Export(ctx, store, res.Root, &out, nil); err != nil {
			t.Fatalf("export accepted tree: %v", err)
		}
		again, err := Import(ctx, store, &out, ImportOptions{Devices: true})
		if err != nil {
			t.Fatalf("import of the export: %v", err)
		}
		if again.Root != res.Root {
			t.Fatalf("export and import changed the tree: %s → %s", res.Root.Short(), again.Root.Short())
		}
	})
}

// FuzzCleanName: an accepted name is a valid relative path without "..".
func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"a/b", "./a", "/abs", "a/../b", "a//b", ".", "a/", "a\\b", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, err := cleanName(name)
		if err != nil || p == "" {
			return
		}
		if err := manifest.ValidatePath(p); err != nil {
			t.Fatalf("cleanName(%q) = %q, invalid: %v", name, p, err)
		}
	})
}
