package manifest

import (
	"strings"
)

// Limits on names and paths.
const (
	// MaxPathLen bounds ValidatePath paths and symlink targets (PATH_MAX).
	MaxPathLen = 4096
	// MaxSessionNameLen bounds session names.
	MaxSessionNameLen = 128
)

// ValidateName reports whether name may be an entry name: non-empty, not
// "." or "..", without '/' or NUL, at most MaxNameLen bytes. Any other
// byte is allowed, as in POSIX, including backslash and invalid UTF-8.
func ValidateName(name string) error {
	switch {
	case name == "":
		return errf(ErrInvalidName, "empty")
	case name == "." || name == "..":
		return errf(ErrInvalidName, "%q is reserved", name)
	case len(name) > MaxNameLen:
		return errf(ErrInvalidName, "%.40q…: %d bytes, over %d", name, len(name), MaxNameLen)
	}
	if i := strings.IndexAny(name, "/\x00"); i >= 0 {
		return errf(ErrInvalidName, "%q: contains %q at byte %d", name, name[i], i)
	}
	return nil
}

// ValidatePath reports whether p is a path the CLI and importers accept:
// relative, slash-separated, each segment a valid name (no empty, "." or
// ".." segment), without NUL or backslash, at most MaxPathLen bytes.
// Backslash is refused here, though legal in names, so that a Windows-style
// path is never mistaken for one name.
func ValidatePath(p string) error {
	switch {
	case p == "":
		return errf(ErrInvalidPath, "empty")
	case len(p) > MaxPathLen:
		return errf(ErrInvalidPath, "%.40q…: %d bytes, over %d", p, len(p), MaxPathLen)
	case p[0] == '/':
		return errf(ErrInvalidPath, "%q: absolute", p)
	}
	if i := strings.IndexByte(p, '\\'); i >= 0 {
		return errf(ErrInvalidPath, "%q: contains a backslash at byte %d", p, i)
	}
	for rest := p; ; {
		seg, tail, more := strings.Cut(rest, "/")
		if err := ValidateName(seg); err != nil {
			return errf(ErrInvalidPath, "%q: segment: %w", p, err)
		}
		if !more {
			return nil
		}
		rest = tail
	}
}

// ValidateSessionName reports whether s may name a session: 1 to
// MaxSessionNameLen bytes of [A-Za-z0-9._-], not starting with '.' or '-'
// (so it is never a hidden file or an option).
func ValidateSessionName(s string) error {
	if s == "" {
		return errf(ErrInvalidName, "session name empty")
	}
	if len(s) > MaxSessionNameLen {
		return errf(ErrInvalidName, "session name %.40q…: %d bytes, over %d", s, len(s), MaxSessionNameLen)
	}
	if s[0] == '.' || s[0] == '-' {
		return errf(ErrInvalidName, "session name %q: starts with %q", s, s[0])
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return errf(ErrInvalidName, "session name %q: byte %q at %d not in [A-Za-z0-9._-]", s, c, i)
		}
	}
	return nil
}
