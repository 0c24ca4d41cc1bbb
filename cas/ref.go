package cas

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// refPrefix names the hash function in the text form of a Ref, so that a
// later format can change the function without ambiguity.
const refPrefix = "sha256:"

// Ref is the SHA-256 of a chunk's plain (uncompressed) bytes. It is a
// comparable value type, usable as a map key. The zero Ref means "no
// content" (an empty file, a hole) and never names a stored chunk.
type Ref [sha256.Size]byte

// Sum returns the Ref of data.
func Sum(data []byte) Ref { return Ref(sha256.Sum256(data)) }

// ParseRef parses the text form produced by String.
func ParseRef(s string) (Ref, error) {
	var r Ref
	hexPart, ok := strings.CutPrefix(s, refPrefix)
	if !ok {
		return r, fmt.Errorf("cas: ref %q: want prefix %q", truncate(s), refPrefix)
	}
	if len(hexPart) != 2*len(r) {
		return r, fmt.Errorf("cas: ref %q: want %d hex digits, have %d", truncate(s), 2*len(r), len(hexPart))
	}
	for i := 0; i < len(hexPart); i++ {
		if c := hexPart[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return r, fmt.Errorf("cas: ref %q: want lower-case hex digits", truncate(s))
		}
	}
	if _, err := hex.Decode(r[:], []byte(hexPart)); err != nil {
		return Ref{}, fmt.Errorf("cas: ref %q: %w", truncate(s), err)
	}
	return r, nil
}

// MustParseRef is ParseRef for constants in tests; it panics on error.
func MustParseRef(s string) Ref {
	r, err := ParseRef(s)
	if err != nil {
		panic(err)
	}
	return r
}

// String returns "sha256:" followed by 64 lower-case hex digits.
func (r Ref) String() string { return refPrefix + hex.EncodeToString(r[:]) }

// Hex returns the 64 hex digits without the prefix (object names, keys).
func (r Ref) Hex() string { return hex.EncodeToString(r[:]) }

// Short returns the first 12 hex digits, for logs and human output.
func (r Ref) Short() string { return hex.EncodeToString(r[:6]) }

// IsZero reports whether r is the zero Ref.
func (r Ref) IsZero() bool { return r == Ref{} }

// MarshalText implements encoding.TextMarshaler (JSON uses it).
func (r Ref) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *Ref) UnmarshalText(b []byte) error {
	p, err := ParseRef(string(b))
	if err != nil {
		return err
	}
	*r = p
	return nil
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
