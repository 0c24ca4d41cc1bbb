package archive

import (
	"errors"
	"fmt"
	"path"
	"strings"

	"homefs/manifest"
)

var (
	// ErrUnsafe: an entry that could write or point outside the tree.
	ErrUnsafe = errors.New("archive: unsafe entry")
	// ErrMalformed: a stream that is not a valid tar archive, or entries
	// that contradict each other.
	ErrMalformed = errors.New("archive: malformed tar stream")
	// ErrUnsupported: an entry of a kind homefs does not store (device,
	// fifo, socket).
	ErrUnsupported = errors.New("archive: unsupported entry type")
)

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

// checkSymlink refuses a symlink at p whose target leaves the tree, read
// lexically from the link's directory.
func checkSymlink(p, target string) error {
	if target == "" {
		return fmt.Errorf("%w: symlink %q has an empty target", ErrMalformed, p)
	}
	if strings.HasPrefix(target, "/") {
		return fmt.Errorf("%w: symlink %q points to absolute path %q", ErrUnsafe, p, target)
	}
	if strings.ContainsRune(target, 0) || len(target) > manifest.MaxPathLen {
		return fmt.Errorf("%w: symlink %q: bad target", ErrMalformed, p)
	}
	resolved := path.Join(path.Dir(p), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("%w: symlink %q points outside the tree (%q)", ErrUnsafe, p, target)
	}
	return nil
}
