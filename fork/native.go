package fork

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/homefs/homefs/manifest"
)

// The native snapshot format of the TypeScript harness:
//
//	{"version":2, "blobStore"?:"juicefs",
//	 "handles":{"claude"|"codex"|"pi":{"id":…,"through":…}},
//	 "files":{"<path>":{"key":"blobs/<64 hex>","bytes":N,"mode"?:0..0o777}}}
//
// with each blob at <blob dir>/blobs/<sha256 hex of its bytes>.
const (
	NativeVersion = 2
	// NativeManifestName is the file ExportNative writes the JSON to.
	NativeManifestName = "snapshot.json"
	// MaxNativeSize bounds the JSON; MaxNativeFiles its files.
	MaxNativeSize  = 64 << 20
	MaxNativeFiles = 1 << 20
	// nativeDefaultMode is a file's mode when the JSON gives none.
	nativeDefaultMode = 0o644
)

// NativeSnapshot is a decoded native snapshot.
type NativeSnapshot struct {
	Version   int                     `json:"version"`
	BlobStore string                  `json:"blobStore,omitempty"`
	Handles   map[string]NativeHandle `json:"handles"`
	Files     map[string]NativeFile   `json:"files"`
}

// NativeHandle is a provider session id and the turn it is valid through;
// unlike manifest.Handle both are always written.
type NativeHandle struct {
	ID      string `json:"id"`
	Through string `json:"through"`
}

// NativeFile is one file of a native snapshot.
type NativeFile struct {
	Key   string  `json:"key"`
	Bytes int64   `json:"bytes"`
	Mode  *uint32 `json:"mode,omitempty"`
}

// nativeProviders are the handle keys the format knows.
var nativeProviders = []string{"claude", "codex", "pi"}

// nativeMap maps native path prefixes to session path prefixes, and back.
// Only Codex's differs: the harness calls its home "codex", a homefs
// session "codex-home" (the Codex provider's Home).
var nativeMap = []struct{ native, session string }{
	{"workspace/", "workspace/"},
	{"claude/projects/", "claude/projects/"},
	{"codex/sessions/", codexHome + "/sessions/"},
	{"pi/", "pi/"},
}

// NativeToSession maps an allowed native path to its path in a session.
func NativeToSession(p string) (string, error) {
	if err := ValidateNativePath(p); err != nil {
		return "", err
	}
	for _, m := range nativeMap {
		if rest, ok := strings.CutPrefix(p, m.native); ok {
			return m.session + rest, nil
		}
	}
	panic("fork: allowed native path without a mapping: " + p)
}

// SessionToNative maps a session path to the native path it is exported
// as; ok is false when the format has no place for it.
func SessionToNative(p string) (string, bool) {
	for _, m := range nativeMap {
		if rest, ok := strings.CutPrefix(p, m.session); ok {
			np := m.native + rest
			return np, ValidateNativePath(np) == nil
		}
	}
	return "", false
}

// ValidateNativePath reports whether p may be a path of a native snapshot:
// a valid relative path (no backslash, no empty, "." or ".." segment) under
// workspace/ (but not workspace/.conversation/** nor
// workspace/.checkpoint-*), or a .jsonl file under claude/projects/,
// codex/sessions/ or pi/.
func ValidateNativePath(p string) error {
	if err := manifest.ValidatePath(p); err != nil {
		return fmt.Errorf("%w: path: %w", ErrNative, err)
	}
	bad := func(why string) error { return fmt.Errorf("%w: path %q: %s", ErrNative, p, why) }
	if rest, ok := strings.CutPrefix(p, "workspace/"); ok {
		first, _, _ := strings.Cut(rest, "/")
		switch {
		case first == ".conversation":
			return bad("workspace/.conversation is the harness's own")
		case strings.HasPrefix(first, ".checkpoint-"):
			return bad("workspace/.checkpoint-* is the harness's own")
		}
		return nil
	}
	for _, prefix := range []string{"claude/projects/", "codex/sessions/", "pi/"} {
		if rest, ok := strings.CutPrefix(p, prefix); ok {
			if base := rest[strings.LastIndexByte(rest, '/')+1:]; len(base) <= len(".jsonl") || !strings.HasSuffix(base, ".jsonl") {
				return bad("want a .jsonl file under " + prefix)
			}
			return nil
		}
	}
	return bad("not under workspace/, claude/projects/, codex/sessions/ or pi/")
}

// DecodeNative parses and validates a native snapshot. It is strict:
// unknown fields, duplicate keys and trailing data are refused, as is any
// path, key, size, mode, handle or version that breaks the rules.
func DecodeNative(b []byte) (*NativeSnapshot, error) {
	if len(b) > MaxNativeSize {
		return nil, fmt.Errorf("%w: %d bytes, over %d: %w", ErrNative, len(b), MaxNativeSize, ErrTooLarge)
	}
	if err := checkDuplicateKeys(b); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNative, err)
	}
	var raw struct {
		Version   *int                        `json:"version"`
		BlobStore *string                     `json:"blobStore"`
		Handles   *map[string]nativeHandle    `json:"handles"`
		Files     *map[string]json.RawMessage `json:"files"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNative, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data after the object", ErrNative)
	}
	switch {
	case raw.Version == nil:
		return nil, fmt.Errorf("%w: no version", ErrNative)
	case *raw.Version != NativeVersion:
		return nil, fmt.Errorf("%w: version %d, want %d", ErrNative, *raw.Version, NativeVersion)
	case raw.Handles == nil:
		return nil, fmt.Errorf("%w: no handles", ErrNative)
	case raw.Files == nil:
		return nil, fmt.Errorf("%w: no files", ErrNative)
	}
	s := &NativeSnapshot{Version: *raw.Version, Handles: map[string]NativeHandle{}, Files: map[string]NativeFile{}}
	if raw.BlobStore != nil {
		s.BlobStore = *raw.BlobStore
		if s.BlobStore == "" {
			return nil, fmt.Errorf("%w: empty blobStore", ErrNative)
		}
	}
	for name, h := range *raw.Handles {
		if h.ID == nil || h.Through == nil {
			return nil, fmt.Errorf("%w: handle %q: want id and through", ErrNative, name)
		}
		s.Handles[name] = NativeHandle{ID: *h.ID, Through: *h.Through}
	}
	for p, rf := range *raw.Files {
		var f struct {
			Key   *string `json:"key"`
			Bytes *int64  `json:"bytes"`
			Mode  *uint32 `json:"mode"`
		}
		d := json.NewDecoder(bytes.NewReader(rf))
		d.DisallowUnknownFields()
		if err := d.Decode(&f); err != nil {
			return nil, fmt.Errorf("%w: file %q: %w", ErrNative, p, err)
		}
		if f.Key == nil || f.Bytes == nil {
			return nil, fmt.Errorf("%w: file %q: want key and bytes", ErrNative, p)
		}
		s.Files[p] = NativeFile{Key: *f.Key, Bytes: *f.Bytes, Mode: f.Mode}
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return s, nil
}

type nativeHandle struct {
	ID      *string `json:"id"`
	Through *string `json:"through"`
}

// Validate checks every rule of the format.
func (s *NativeSnapshot) Validate() error {
	if s.Version != NativeVersion {
		return fmt.Errorf("%w: version %d, want %d", ErrNative, s.Version, NativeVersion)
	}
	if s.BlobStore != "" && s.BlobStore != "juicefs" {
		return fmt.Errorf("%w: blobStore %q, want juicefs or none", ErrNative, s.BlobStore)
	}
	for name, h := range s.Handles {
		if !slices.Contains(nativeProviders, name) {
			return fmt.Errorf("%w: handle %q: want one of %s", ErrNative, name, strings.Join(nativeProviders, ", "))
		}
		if strings.TrimSpace(h.ID) == "" || len(h.ID) > manifest.MaxHandleLen || len(h.Through) > manifest.MaxHandleLen {
			return fmt.Errorf("%w: handle %q: id empty or a field over %d bytes", ErrNative, name, manifest.MaxHandleLen)
		}
	}
	if len(s.Files) > MaxNativeFiles {
		return fmt.Errorf("%w: %d files, over %d: %w", ErrNative, len(s.Files), MaxNativeFiles, ErrTooLarge)
	}
	sizes := map[string]int64{}
	paths := slices.Sorted(maps.Keys(s.Files))
	for _, p := range paths {
		f := s.Files[p]
		if err := ValidateNativePath(p); err != nil {
			return err
		}
		for j := strings.IndexByte(p, '/'); j >= 0; j = next(p, j) {
			if _, ok := s.Files[p[:j]]; ok {
				return fmt.Errorf("%w: %q is a file and a directory of %q", ErrNative, p[:j], p)
			}
		}
		if !isBlobKey(f.Key) {
			return fmt.Errorf("%w: file %q: key %q, want blobs/<64 lower-case hex>", ErrNative, p, f.Key)
		}
		if f.Bytes < 0 {
			return fmt.Errorf("%w: file %q: bytes %d", ErrNative, p, f.Bytes)
		}
		if f.Mode != nil && *f.Mode > 0o777 {
			return fmt.Errorf("%w: file %q: mode %#o over 0777", ErrNative, p, *f.Mode)
		}
		if n, ok := sizes[f.Key]; ok && n != f.Bytes {
			return fmt.Errorf("%w: blob %s listed with %d and %d bytes", ErrNative, f.Key, n, f.Bytes)
		}
		sizes[f.Key] = f.Bytes
	}
	return nil
}

// next returns the index of the '/' after index j of p, -1 if none.
func next(p string, j int) int {
	k := strings.IndexByte(p[j+1:], '/')
	if k < 0 {
		return -1
	}
	return j + 1 + k
}

func isBlobKey(k string) bool {
	hex, ok := strings.CutPrefix(k, "blobs/")
	if !ok || len(hex) != 64 {
		return false
	}
	for i := 0; i < len(hex); i++ {
		if c := hex[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// maxJSONDepth bounds nesting in checkDuplicateKeys.
const maxJSONDepth = 64

// checkDuplicateKeys refuses an object with a key twice (encoding/json
// would silently keep the last, so two blobs could claim one path).
func checkDuplicateKeys(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var walk func(depth int) error
	walk = func(depth int) error {
		if depth > maxJSONDepth {
			return errors.New("nested too deep")
		}
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return err
				}
				k, _ := kt.(string)
				if seen[k] {
					return fmt.Errorf("key %q twice", k)
				}
				seen[k] = true
				if err := walk(depth + 1); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		case json.Delim('['):
			for dec.More() {
				if err := walk(depth + 1); err != nil {
					return err
				}
			}
			_, err = dec.Token()
			return err
		}
		return nil
	}
	return walk(0)
}
