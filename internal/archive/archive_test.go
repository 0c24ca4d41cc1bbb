package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

type entry struct {
	name, link string
	typ        byte
	body       string
}

func makeTar(t *testing.T, ents ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: 0o644, Size: int64(len(e.body)), ModTime: time.Unix(1700000000, 0)}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		require.NoError(t, tw.WriteHeader(h))
		if e.typ == tar.TypeReg {
			_, err := tw.Write([]byte(e.body))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func TestImportRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		ents []entry
		want error
	}{
		{"dotdot", []entry{{name: "a/../../etc/passwd", typ: tar.TypeReg, body: "x"}}, ErrUnsafe},
		{"absolute", []entry{{name: "/etc/passwd", typ: tar.TypeReg, body: "x"}}, ErrUnsafe},
		{"below a symlink", []entry{{name: "l", typ: tar.TypeSymlink, link: "/etc"}, {name: "l/passwd", typ: tar.TypeReg, body: "x"}}, ErrUnsafe},
		{"dir below a symlink", []entry{{name: "l", typ: tar.TypeSymlink, link: "d"}, {name: "l/d/", typ: tar.TypeDir}}, ErrUnsafe},
		{"hardlink below a symlink", []entry{{name: "f", typ: tar.TypeReg}, {name: "l", typ: tar.TypeSymlink, link: "/tmp"}, {name: "l/f", typ: tar.TypeLink, link: "f"}}, ErrUnsafe},
		{"symlink empty", []entry{{name: "l", typ: tar.TypeSymlink}}, ErrMalformed},
		{"hardlink outside", []entry{{name: "h", typ: tar.TypeLink, link: "../x"}}, ErrUnsafe},
		{"hardlink missing", []entry{{name: "h", typ: tar.TypeLink, link: "nope"}}, ErrUnsafe},
		{"device", []entry{{name: "dev", typ: tar.TypeChar}}, ErrUnsupported},
		{"file under file", []entry{{name: "a", typ: tar.TypeReg, body: "x"}, {name: "a/b", typ: tar.TypeReg, body: "y"}}, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := cas.NewMemory()
			_, err := Import(context.Background(), st, bytes.NewReader(makeTar(t, tc.ents...)), ImportOptions{})
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestImportMalformed(t *testing.T) {
	good := makeTar(t, entry{name: "f", typ: tar.TypeReg, body: string(bytes.Repeat([]byte("z"), 3000))})
	for name, data := range map[string][]byte{
		"garbage":   bytes.Repeat([]byte("not a tar "), 100),
		"truncated": good[:1024],
		"no end":    good[:512+3072],
		"empty":     {},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Import(context.Background(), cas.NewMemory(), bytes.NewReader(data), ImportOptions{})
			require.ErrorIs(t, err, ErrMalformed)
		})
	}
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	src := t.TempDir()
	big := bytes.Repeat([]byte("0123456789abcdef"), 300000) // over ChunkSize*MaxInline? several chunks
	big = append(big, make([]byte, 200000)...)              // a hole at the end
	require.NoError(t, os.MkdirAll(filepath.Join(src, "codex/sessions/2025"), 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(src, "codex/sessions/2025/rollout.jsonl"), []byte("{\"a\":1}\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(src, "big.bin"), big, 0o644))
	require.NoError(t, os.Symlink("codex/sessions", filepath.Join(src, "link")))
	require.NoError(t, os.Link(filepath.Join(src, "big.bin"), filepath.Join(src, "big2.bin")))

	var tarBuf bytes.Buffer
	require.NoError(t, TarDir(ctx, src, &tarBuf, nil))
	st := cas.NewMemory()
	res, err := Import(ctx, st, &tarBuf, ImportOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Files)
	require.EqualValues(t, 1, res.Symlinks)

	dst := exportExtract(t, st, res.Root)
	b, err := os.ReadFile(filepath.Join(dst, "big.bin"))
	require.NoError(t, err)
	require.True(t, bytes.Equal(big, b))
	b, err = os.ReadFile(filepath.Join(dst, "codex/sessions/2025/rollout.jsonl"))
	require.NoError(t, err)
	require.Equal(t, "{\"a\":1}\n", string(b))
	fi, err := os.Stat(filepath.Join(dst, "codex/sessions/2025/rollout.jsonl"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	l, err := os.Readlink(filepath.Join(dst, "link"))
	require.NoError(t, err)
	require.Equal(t, "codex/sessions", l)
	a, _ := os.Stat(filepath.Join(dst, "big.bin"))
	c, _ := os.Stat(filepath.Join(dst, "big2.bin"))
	require.True(t, os.SameFile(a, c), "hard link kept")

	// A corrupted chunk stops the export.
	ref := cas.Sum(big[:64<<10])
	require.NoError(t, st.CorruptForTest(ref))
	err = Export(ctx, st, res.Root, &bytes.Buffer{}, nil)
	require.True(t, errors.Is(err, cas.ErrCorrupt), "%v", err)
}

// TestTarDirFollowsItsArgument checks that a dir given as a symlink (or
// through one) is read as the directory it names, and that symlinks
// inside it are still not followed.
func TestTarDirFollowsItsArgument(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	real := filepath.Join(base, "real")
	require.NoError(t, os.MkdirAll(filepath.Join(real, "sub"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(real, "sub/f"), []byte("x"), 0o644))
	require.NoError(t, os.Symlink("sub", filepath.Join(real, "inner")))
	require.NoError(t, os.Symlink(real, filepath.Join(base, "link")))
	require.NoError(t, os.Symlink("link", filepath.Join(base, "link2")))
	for _, dir := range []string{real, filepath.Join(base, "link"), filepath.Join(base, "link2"), filepath.Join(base, "link2/sub/..")} {
		var buf bytes.Buffer
		require.NoError(t, TarDir(ctx, dir, &buf, nil), dir)
		var names []string
		tr := tar.NewReader(&buf)
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			names = append(names, h.Name+" "+string(h.Typeflag))
		}
		require.Equal(t, []string{"inner " + string(tar.TypeSymlink), "sub/ " + string(tar.TypeDir), "sub/f " + string(tar.TypeReg)}, names, dir)
	}
	file := filepath.Join(base, "file-link")
	require.NoError(t, os.Symlink(filepath.Join(real, "sub/f"), file))
	require.ErrorIs(t, TarDir(ctx, file, &bytes.Buffer{}, nil), syscall.ENOTDIR)
}

// exportExtract exports the tree at root and extracts it into a new
// directory, which it returns.
func exportExtract(t *testing.T, st cas.Getter, root cas.Ref) string {
	t.Helper()
	ctx := context.Background()
	var out bytes.Buffer
	require.NoError(t, Export(ctx, st, root, &out, nil))
	dst := filepath.Join(t.TempDir(), "out")
	require.NoError(t, Extract(ctx, &out, dst, nil))
	return dst
}

func TestExtractRefusesSymlinkEscape(t *testing.T) {
	data := makeTar(t,
		entry{name: "d/", typ: tar.TypeDir},
		entry{name: "d/up", typ: tar.TypeSymlink, link: ".."},
		entry{name: "esc", typ: tar.TypeSymlink, link: "d/up"},
		entry{name: "esc/x", typ: tar.TypeReg, body: "boom"},
	)
	dst := filepath.Join(t.TempDir(), "out")
	err := Extract(context.Background(), bytes.NewReader(data), dst, nil)
	require.ErrorIs(t, err, ErrUnsafe)
}

// TestImportLinkGroups checks that a hard link names the inode its target
// holds at that point of the stream, for files and symlinks alike.
func TestImportLinkGroups(t *testing.T) {
	ctx := context.Background()
	data := makeTar(t,
		entry{name: "d/", typ: tar.TypeDir},
		entry{name: "a", typ: tar.TypeReg, body: "one"},
		entry{name: "b", typ: tar.TypeLink, link: "a"},
		entry{name: "c", typ: tar.TypeLink, link: "b"},  // a link to a link: the same inode
		entry{name: "a", typ: tar.TypeReg, body: "two"}, // replaces a: b and c keep "one"
		entry{name: "l", typ: tar.TypeSymlink, link: "d"},
		entry{name: "d/l", typ: tar.TypeLink, link: "l"}, // a hard-linked symlink
		entry{name: "x", typ: tar.TypeReg, body: "alone"},
		entry{name: "y", typ: tar.TypeLink, link: "x"},
		entry{name: "y", typ: tar.TypeReg, body: "new y"}, // x is alone again
	)
	st := cas.NewMemory()
	res, err := Import(ctx, st, bytes.NewReader(data), ImportOptions{})
	require.NoError(t, err)
	got := map[string]string{}
	ids := map[uint64][]string{}
	require.NoError(t, manifest.Walk(ctx, st, res.Root, func(p string, e *manifest.Entry) error {
		desc := fmt.Sprintf("%v nlink=%d", e.Kind, e.Nlink)
		if e.Kind == manifest.KindSymlink {
			desc += " -> " + e.Target
		}
		got[p] = desc
		if e.LinkID != 0 {
			ids[e.LinkID] = append(ids[e.LinkID], p)
		}
		return nil
	}))
	require.Equal(t, map[string]string{
		"a": "file nlink=0", "b": "file nlink=2", "c": "file nlink=2",
		"d": "dir nlink=0", "d/l": "symlink nlink=2 -> d", "l": "symlink nlink=2 -> d",
		"x": "file nlink=0", "y": "file nlink=0",
	}, got)
	require.Len(t, ids, 2)
	for _, names := range ids {
		require.Contains(t, [][]string{{"b", "c"}, {"d/l", "l"}}, names)
	}

	// The hard-linked symlink survives export and extraction.
	dst := exportExtract(t, st, res.Root)
	a, err := os.Lstat(filepath.Join(dst, "l"))
	require.NoError(t, err)
	b, err := os.Lstat(filepath.Join(dst, "d/l"))
	require.NoError(t, err)
	require.True(t, os.SameFile(a, b), "hard-linked symlink kept")
	require.Equal(t, fs.ModeSymlink, b.Mode().Type())
}

// TestSymlinksLeavingTheTree checks that symlinks to absolute paths or
// out of the tree (Codex makes such links under tmp/arg0) are stored and
// extracted with their targets byte for byte, and that nothing is ever
// written through one.
func TestSymlinksLeavingTheTree(t *testing.T) {
	ctx := context.Background()
	outside := t.TempDir() // where the links point; must stay as it is
	fi, err := os.Stat(outside)
	require.NoError(t, err)
	targets := map[string]string{
		"tmp/arg0/codex-arg0x/codex-linux-sandbox": "/usr/lib/node_modules/@openai/codex/bin/codex-x86_64-unknown-linux-musl",
		"out":   outside,
		"up":    "../../etc",
		"d/up":  "..",
		"odd":   "a//b/./../c/",
		"space": " /x\n",
	}
	var ents []entry
	for _, name := range []string{"tmp/arg0/codex-arg0x/codex-linux-sandbox", "out", "up", "d/up", "odd", "space"} {
		ents = append(ents, entry{name: name, typ: tar.TypeSymlink, link: targets[name]})
	}
	// A hard link of a symlink is the same link wherever its new name is.
	ents = append(ents, entry{name: "d/out", typ: tar.TypeLink, link: "out"})
	targets["d/out"] = outside
	st := cas.NewMemory()
	res, err := Import(ctx, st, bytes.NewReader(makeTar(t, ents...)), ImportOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 7, res.Symlinks)
	got := map[string]string{}
	require.NoError(t, manifest.Walk(ctx, st, res.Root, func(p string, e *manifest.Entry) error {
		if e.Kind == manifest.KindSymlink {
			got[p] = e.Target
		}
		return nil
	}))
	require.Equal(t, targets, got)

	dst := exportExtract(t, st, res.Root)
	for name, want := range targets {
		l, err := os.Readlink(filepath.Join(dst, name))
		require.NoError(t, err, name)
		require.Equal(t, want, l, name)
	}
	a, err := os.Lstat(filepath.Join(dst, "out"))
	require.NoError(t, err)
	b, err := os.Lstat(filepath.Join(dst, "d/out"))
	require.NoError(t, err)
	require.True(t, os.SameFile(a, b), "hard-linked symlink kept")

	// TarDir reads them back as they are.
	var again bytes.Buffer
	require.NoError(t, TarDir(ctx, dst, &again, nil))
	res2, err := Import(ctx, st, &again, ImportOptions{})
	require.NoError(t, err)
	got2 := map[string]string{}
	require.NoError(t, manifest.Walk(ctx, st, res2.Root, func(p string, e *manifest.Entry) error {
		if e.Kind == manifest.KindSymlink {
			got2[p] = e.Target
		}
		return nil
	}))
	require.Equal(t, targets, got2)

	// Nothing goes through a link: not a name below it, nor a directory
	// entry for the link's own name (whose chmod would follow it).
	for name, ents := range map[string][]entry{
		"file below":     {{name: "l", typ: tar.TypeSymlink, link: outside}, {name: "l/x", typ: tar.TypeReg, body: "boom"}},
		"dir below":      {{name: "l", typ: tar.TypeSymlink, link: outside}, {name: "l/d/", typ: tar.TypeDir}},
		"hardlink below": {{name: "f", typ: tar.TypeReg, body: "boom"}, {name: "l", typ: tar.TypeSymlink, link: outside}, {name: "l/f", typ: tar.TypeLink, link: "f"}},
		"symlink below":  {{name: "l", typ: tar.TypeSymlink, link: outside}, {name: "l/s", typ: tar.TypeSymlink, link: "x"}},
		"dir over link":  {{name: "l", typ: tar.TypeSymlink, link: outside}, {name: "l/", typ: tar.TypeDir, body: ""}},
		"file over link": {{name: "l", typ: tar.TypeSymlink, link: outside}, {name: "l", typ: tar.TypeReg, body: "boom"}},
	} {
		data := makeTar(t, ents...)
		err := Extract(ctx, bytes.NewReader(data), filepath.Join(t.TempDir(), "out"), nil)
		require.Error(t, err, name)
		if name != "file over link" && name != "dir over link" {
			require.ErrorIs(t, err, ErrUnsafe, name)
			_, err = Import(ctx, cas.NewMemory(), bytes.NewReader(data), ImportOptions{})
			require.ErrorIs(t, err, ErrUnsafe, name)
		}
	}
	left, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, left, "nothing written through a link")
	fi2, err := os.Stat(outside)
	require.NoError(t, err)
	require.Equal(t, fi.Mode(), fi2.Mode(), "no chmod through a link")
}

// TestRootAttributes checks that the root's own attributes travel as
// "./": import keeps them in the root's tree, export writes them back.
func TestRootAttributes(t *testing.T) {
	ctx := context.Background()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: 0o2770, Uid: 1000, Gid: 100,
		ModTime: time.Unix(1700000000, 5), Format: tar.FormatPAX, PAXRecords: map[string]string{xattrPrefix + "user.k": "v"}}))
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "f", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: time.Unix(1700000000, 0)}))
	require.NoError(t, tw.Close())
	st := cas.NewMemory()
	res, err := Import(ctx, st, &buf, ImportOptions{})
	require.NoError(t, err)
	top, err := manifest.GetTree(ctx, st, res.Root)
	require.NoError(t, err)
	require.Equal(t, &manifest.DirAttr{Mode: 0o2770, UID: 1000, GID: 100, MtimeNs: 1700000000_000000005, CtimeNs: 1700000000_000000005,
		Xattrs: []manifest.Xattr{{Name: "user.k", Value: []byte("v")}}}, top.Self)

	var out bytes.Buffer
	require.NoError(t, Export(ctx, st, res.Root, &out, nil))
	again, err := Import(ctx, st, bytes.NewReader(out.Bytes()), ImportOptions{})
	require.NoError(t, err)
	require.Equal(t, res.Root, again.Root, "export and import keep the root's attributes")
}

// TestExportChunkLength: export places every stored chunk at its offset,
// so a chunk that breaks the chunk-length rule (a file grown to 262144
// bytes past its short last chunk of 150000) stops it with ErrCorrupt, and
// the same chunk as the last of a 150000-byte file exports.
func TestExportChunkLength(t *testing.T) {
	ctx := context.Background()
	st := cas.NewMemory()
	data := bytes.Repeat([]byte("0123456789abcdef"), 150000/16+1)[:150000]
	var refs []cas.Ref
	for off := 0; off < len(data); off += manifest.ChunkSize {
		ref, err := st.Put(ctx, data[off:min(off+manifest.ChunkSize, len(data))])
		require.NoError(t, err)
		refs = append(refs, ref)
	}
	for _, tc := range []struct {
		name   string
		size   int64
		chunks []cas.Ref
		ok     bool
	}{
		{"exact", 150000, refs, true},
		{"grown past a short chunk", 262144, append(append([]cas.Ref(nil), refs...), cas.Ref{}), false},
		{"shrunk below a chunk", 140000, refs, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, err := manifest.PutTree(ctx, st, &manifest.Tree{Entries: []manifest.Entry{
				{Name: "f", Kind: manifest.KindFile, Mode: 0o644, Size: tc.size, Chunks: tc.chunks},
			}})
			require.NoError(t, err)
			var out bytes.Buffer
			err = Export(ctx, st, root, &out, nil)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, cas.ErrCorrupt)
			require.ErrorIs(t, err, manifest.ErrInvalid)
			require.Contains(t, err.Error(), "chunk 2:")
		})
	}
}

func TestIsZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int // length
		at   int // where a non-zero byte is, or -1
		want bool
	}{
		{"empty", 0, -1, true},
		{"one chunk", manifest.ChunkSize, -1, true},
		{"longer than a chunk", 3*manifest.ChunkSize + 5, -1, true},
		{"first byte", 100, 0, false},
		{"last byte", manifest.ChunkSize, manifest.ChunkSize - 1, false},
		{"past the first chunk", 3*manifest.ChunkSize + 5, 2*manifest.ChunkSize + 7, false},
		{"the very end", 3*manifest.ChunkSize + 5, 3*manifest.ChunkSize + 4, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, tc.n)
			if tc.at >= 0 {
				b[tc.at] = 1
			}
			require.Equal(t, tc.want, isZero(b))
		})
	}
}
