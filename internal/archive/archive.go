package archive

import (
	"archive/tar"
	"errors"
	"fmt"
	"strings"

	"github.com/homefs/homefs/manifest"
)

var (
	// ErrUnsafe: an entry that could write outside the tree: an absolute
	// or ".." name, a name below a symlink, a hard link to a name outside.
	ErrUnsafe = errors.New("archive: unsafe entry")
	// ErrMalformed: a stream that is not a valid tar archive, or entries
	// that contradict each other.
	ErrMalformed = errors.New("archive: malformed tar stream")
	// ErrUnsupported: an entry homefs does not store: a tar type it has no
	// kind for, a device node unless allowed, a sparse file, a file over
	// MaxFileSize.
	ErrUnsupported = errors.New("archive: unsupported entry")
)

// MaxFileSize bounds a file of an imported archive: it is the most a
// homefs file holds (manifest.MaxFileSize).
const MaxFileSize = manifest.MaxFileSize

// checkSparse refuses a sparse file: GNU's own type, or a file with any
// GNU.sparse PAX record. archive/tar makes up a sparse file's holes as
// zeros without reading a byte of input, and cannot skip them, so a
// header of a few hundred bytes could claim 2^63 bytes of content that
// take hours to read (and, for Extract, as much disk). Refused, every
// entry's content costs what its bytes in the stream do. An archive made
// without --sparse imports the same: all-zero chunks are stored as holes.
func checkSparse(hdr *tar.Header) error {
	sparse := hdr.Typeflag == tar.TypeGNUSparse
	for k := range hdr.PAXRecords {
		sparse = sparse || strings.HasPrefix(k, "GNU.sparse.")
	}
	if sparse {
		return fmt.Errorf("%w: %q is a sparse file, which homefs does not read (archive it without --sparse: its holes are still stored as holes)", ErrUnsupported, hdr.Name)
	}
	return nil
}

// Progress is told the entries and content bytes handled so far.
type Progress func(entries, bytes int64)

// cleanName turns a tar header name into a tree path: "" for the root
// ("." or "./"), otherwise a path accepted by manifest.ValidatePath.
func cleanName(name string) (string, error) {
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: %q is an absolute path", ErrUnsafe, name)
	}
	p := strings.TrimSuffix(name, "/")
	for strings.HasPrefix(p, "./") {
		p = strings.TrimPrefix(p, "./")
	}
	if p == "." || p == "" {
		return "", nil
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: %q has a \"..\" segment", ErrUnsafe, name)
		}
	}
	if err := manifest.ValidatePath(p); err != nil {
		return "", fmt.Errorf("%w: %q: %w", ErrUnsafe, name, err)
	}
	return p, nil
}

// checkTarget refuses a symlink target that no tree can hold. Where it
// points is not checked: a symlink is stored and written as a link, with
// its target byte for byte, and never followed (agents' homes hold links
// to absolute paths, such as Codex's tmp/arg0 links into /usr/lib).
func checkTarget(p, target string) error {
	if target == "" {
		return fmt.Errorf("%w: symlink %q has an empty target", ErrMalformed, p)
	}
	if strings.ContainsRune(target, 0) || len(target) > manifest.MaxPathLen {
		return fmt.Errorf("%w: symlink %q: bad target", ErrMalformed, p)
	}
	return nil
}
