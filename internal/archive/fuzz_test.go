package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
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

// addSeeds seeds a tar fuzz target: the kinds of entry, entries to
// refuse, a sparse file's claim, and no tar at all.
func addSeeds(f *testing.F) {
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
	f.Add(sparseClaim(f, 1<<40))
}

// FuzzImport feeds arbitrary bytes to Import: it must never panic, never
// accept a tree with an invalid path, a symlink leaving the tree or a file
// bigger than the stream, and what it accepts must export and import
// again to the same root.
func FuzzImport(f *testing.F) {
	addSeeds(f)
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
			// Every byte of a file comes from the stream: no content made up.
			if e.Kind == manifest.KindFile && e.Size > int64(len(data)) {
				t.Fatalf("accepted file %q of %d bytes from a stream of %d", p, e.Size, len(data))
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

// FuzzExtract feeds arbitrary bytes to Extract: it must never panic,
// never write beside its directory, and never write more file content
// than the stream holds (a hard-linked file counted once).
func FuzzExtract(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		dst := filepath.Join(base, "out")
		_ = Extract(context.Background(), bytes.NewReader(data), dst, nil)
		if ents, err := os.ReadDir(base); err != nil || len(ents) != 1 {
			t.Fatalf("beside the directory: %v %v", ents, err)
		}
		seen := make(map[uint64]bool)
		var content int64
		err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				// Its mode came from the stream: let the walk (and, as
				// another user than root, the cleanup) in.
				return os.Chmod(p, 0o700)
			}
			if !d.Type().IsRegular() {
				return nil
			}
			var st unix.Stat_t
			if err := unix.Lstat(p, &st); err != nil {
				return err
			}
			if !seen[st.Ino] {
				seen[st.Ino] = true
				content += st.Size
			}
			return nil
		})
		if err != nil {
			t.Fatalf("walk: %v", err)
		}
		if content > int64(len(data)) {
			t.Fatalf("wrote %d bytes of files from a stream of %d", content, len(data))
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
