package fork

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/atomicfile"
	"github.com/homefs/homefs/manifest"
)

// ImportNative reads a native snapshot (its JSON, and the blob directory
// holding blobs/<hex>) into the store and returns the root of the session
// tree it describes (paths mapped by NativeToSession) and its handles.
//
// Every blob is checked, size and SHA-256, before anything is written;
// while chunking, each is hashed again, so a blob changed between the two
// passes fails the import (leaving only unreferenced chunks). Files get
// the JSON's mode (0644 if none) and zero times, so the same snapshot
// always gives the same root.
func ImportNative(ctx context.Context, store cas.Putter, manifestJSON []byte, blobDir string) (cas.Ref, map[string]manifest.Handle, error) {
	s, err := DecodeNative(manifestJSON)
	if err != nil {
		return cas.Ref{}, nil, err
	}
	keys := map[string]int64{}
	for _, f := range s.Files {
		keys[f.Key] = f.Bytes
	}
	sorted := slices.Sorted(maps.Keys(keys))
	for _, k := range sorted {
		if err := checkBlob(ctx, blobDir, k, keys[k], nil); err != nil {
			return cas.Ref{}, nil, err
		}
	}
	stored := make(map[string]manifest.Entry, len(keys))
	for _, k := range sorted {
		var e manifest.Entry
		err := checkBlob(ctx, blobDir, k, keys[k], func(r io.Reader) (err error) {
			e, _, err = PutFile(ctx, store, r)
			return err
		})
		if err != nil {
			return cas.Ref{}, nil, err
		}
		stored[k] = e
	}
	files := make(map[string]manifest.Entry, len(s.Files))
	for p, f := range s.Files {
		sp, err := NativeToSession(p)
		if err != nil {
			return cas.Ref{}, nil, err
		}
		e := stored[f.Key]
		e.Mode = nativeDefaultMode
		if f.Mode != nil {
			e.Mode = *f.Mode
		}
		files[sp] = e
	}
	root, err := manifest.BuildTree(ctx, store, files)
	if err != nil {
		return cas.Ref{}, nil, fmt.Errorf("fork: import native: %w", err)
	}
	handles := make(map[string]manifest.Handle, len(s.Handles))
	for name, h := range s.Handles {
		handles[name] = manifest.Handle{ID: h.ID, Through: h.Through}
	}
	return root, handles, nil
}

// checkBlob opens blob key under dir, checks it is a regular file of size
// bytes, and passes its content to use (nil: just read it), then checks
// the SHA-256 of what was read against the key.
func checkBlob(ctx context.Context, dir, key string, size int64, use func(io.Reader) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	fp := filepath.Join(dir, filepath.FromSlash(key))
	f, err := os.Open(fp)
	if err != nil {
		return fmt.Errorf("%w: blob %s: %w", ErrNative, key, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("%w: blob %s: %w", ErrNative, key, err)
	}
	if !st.Mode().IsRegular() || st.Size() != size {
		return fmt.Errorf("%w: blob %s: %v of %d bytes, want a file of %d", ErrNative, key, st.Mode().Type(), st.Size(), size)
	}
	h := sha256.New()
	r := io.TeeReader(io.LimitReader(f, size+1), h)
	var n int64
	counted := readerFunc(func(p []byte) (int, error) {
		k, err := r.Read(p)
		n += int64(k)
		return k, err
	})
	if use == nil {
		_, err = io.Copy(io.Discard, counted)
	} else {
		err = use(counted)
	}
	if err != nil {
		return fmt.Errorf("%w: blob %s: %w", ErrNative, key, err)
	}
	if n != size {
		return fmt.Errorf("%w: blob %s: read %d bytes, want %d", ErrNative, key, n, size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.TrimPrefix(key, "blobs/") {
		return fmt.Errorf("%w: blob %s: content hashes to %s", ErrNative, key, got)
	}
	return nil
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// ExportNative writes the snapshot tree root, with handles, as a native
// snapshot into dir: dir/snapshot.json and dir/blobs/<hex>. Only the paths
// the format allows are written (mapped by SessionToNative); leftOut lists
// the others, a directory with nothing exportable as one "dir/" entry,
// and "handle NAME" for handles of providers the format does not know.
// Blobs and the JSON are written durably (temp file, fsync, rename, fsync
// of the directory); the JSON last, so its presence means a whole export.
func ExportNative(ctx context.Context, g cas.Getter, root cas.Ref, handles map[string]manifest.Handle, dir string) (leftOut []string, err error) {
	blobs := filepath.Join(dir, "blobs")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, err
	}
	s := &NativeSnapshot{Version: NativeVersion, Handles: map[string]NativeHandle{}, Files: map[string]NativeFile{}}
	for _, name := range slices.Sorted(maps.Keys(handles)) {
		if slices.Contains(nativeProviders, name) {
			s.Handles[name] = NativeHandle{ID: handles[name].ID, Through: handles[name].Through}
		} else {
			leftOut = append(leftOut, "handle "+name)
		}
	}
	err = manifest.Walk(ctx, g, root, func(p string, e *manifest.Entry) error {
		if e.Kind == manifest.KindDir {
			if !mayHoldNative(p) {
				leftOut = append(leftOut, p+"/")
				return manifest.SkipSubtree
			}
			return nil
		}
		np, ok := SessionToNative(p)
		if !ok || e.Kind != manifest.KindFile {
			leftOut = append(leftOut, p)
			return nil
		}
		key, err := exportBlob(ctx, g, e, blobs)
		if err != nil {
			return fmt.Errorf("fork: export %s: %w", p, err)
		}
		mode := e.Mode & 0o777
		s.Files[np] = NativeFile{Key: key, Bytes: e.Size, Mode: &mode}
		return nil
	})
	if err != nil {
		return leftOut, err
	}
	if err := atomicfile.SyncDir(blobs); err != nil {
		return leftOut, err
	}
	if err := s.Validate(); err != nil {
		return leftOut, fmt.Errorf("fork: export: %w", err)
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return leftOut, err
	}
	return leftOut, atomicfile.WriteFile(filepath.Join(dir, NativeManifestName), append(b, '\n'), 0o644)
}

// mayHoldNative reports whether directory p of a session may hold a path
// the native format allows.
func mayHoldNative(p string) bool {
	d := p + "/"
	if np, ok := strings.CutPrefix(d, "workspace/"); ok {
		first, _, _ := strings.Cut(np, "/")
		return first != ".conversation" && !strings.HasPrefix(first, ".checkpoint-")
	}
	for _, m := range nativeMap {
		if strings.HasPrefix(d, m.session) || strings.HasPrefix(m.session, d) {
			return true
		}
	}
	return false
}

// exportBlob writes the content of e to blobs/<sha256> and returns its key.
func exportBlob(ctx context.Context, g cas.Getter, e *manifest.Entry, blobs string) (string, error) {
	c, err := OpenContent(ctx, g, e)
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(blobs, ".tmp-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), c); err != nil {
		return "", err
	}
	if err := tmp.Sync(); err != nil {
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	sum := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(tmp.Name(), filepath.Join(blobs, sum)); err != nil {
		return "", err
	}
	return "blobs/" + sum, nil
}
