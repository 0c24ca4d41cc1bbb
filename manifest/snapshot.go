package manifest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/homefs/homefs/cas"
)

// Limits on snapshot records.
const (
	// MaxSnapshotSize bounds an encoded snapshot record (the most a
	// cas.Names value holds).
	MaxSnapshotSize = 1 << 20
	// MaxMessageLen bounds Snapshot.Message.
	MaxMessageLen = 64 << 10
	// MaxHandles bounds Snapshot.Handles.
	MaxHandles = 64
	// MaxHandleLen bounds a provider name, a handle's ID and Through.
	MaxHandleLen = 1024
)

// EncodeSnapshot returns the canonical JSON of s after validating it:
// fields in declaration order, handles sorted by provider, no spaces.
func EncodeSnapshot(s *Snapshot) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, errf(ErrInvalid, "snapshot: %v", err)
	}
	if len(b) > MaxSnapshotSize {
		return nil, errf(ErrTooLarge, "snapshot: %d bytes, over %d", len(b), MaxSnapshotSize)
	}
	return b, nil
}

// DecodeSnapshot parses and validates a snapshot record. Only the
// canonical form is accepted (EncodeSnapshot of the result returns
// exactly b), so a record's ID names one record.
func DecodeSnapshot(b []byte) (*Snapshot, error) {
	if len(b) > MaxSnapshotSize {
		return nil, errf(ErrTooLarge, "snapshot: %d bytes, over %d", len(b), MaxSnapshotSize)
	}
	// Read the version alone first, so a record of a later format says so
	// rather than failing on its new fields.
	var v struct {
		Version *int `json:"version"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, errf(ErrMalformed, "snapshot: %v", err)
	}
	if v.Version == nil || *v.Version != FormatVersion && *v.Version != SnapshotLayoutVersion {
		got := "none"
		if v.Version != nil {
			got = strconv.Itoa(*v.Version)
		}
		return nil, errf(ErrUnsupportedVersion, "snapshot: version %s, want %d or %d", got, FormatVersion, SnapshotLayoutVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	s := new(Snapshot)
	if err := dec.Decode(s); err != nil {
		return nil, errf(ErrMalformed, "snapshot: %v", err)
	}
	canon, err := EncodeSnapshot(s)
	if err != nil {
		return nil, err
	}
	if !bytes.Equal(canon, b) {
		return nil, errf(ErrMalformed, "snapshot: not in canonical form")
	}
	return s, nil
}

// SnapshotVersion is the version of a snapshot record with layout l.
func SnapshotVersion(l *Layout) int {
	if l != nil {
		return SnapshotLayoutVersion
	}
	return FormatVersion
}

// SnapshotID returns the ID of an encoded snapshot record: the hex of its
// ref.
func SnapshotID(encoded []byte) string { return cas.Sum(encoded).Hex() }

// Validate checks the rules of a snapshot record.
func (s *Snapshot) Validate() error {
	if want := SnapshotVersion(s.Layout); s.Version != want {
		if s.Version == FormatVersion || s.Version == SnapshotLayoutVersion {
			return errf(ErrInvalid, "snapshot: version %d, but a record %s a layout is version %d", s.Version, map[bool]string{true: "with", false: "without"}[s.Layout != nil], want)
		}
		return errf(ErrUnsupportedVersion, "snapshot: version %d, want %d", s.Version, want)
	}
	if err := ValidateSessionName(s.Session); err != nil {
		return wrapf(err, "snapshot")
	}
	if s.Parent != "" && !isSnapshotID(s.Parent) {
		return errf(ErrInvalid, "snapshot: parent %.80q: want 64 lower-case hex digits", s.Parent)
	}
	if o := s.Origin; o != nil {
		if err := ValidateSessionName(o.Session); err != nil {
			return wrapf(err, "snapshot: origin")
		}
		if o.Snapshot != "" && !isSnapshotID(o.Snapshot) {
			return errf(ErrInvalid, "snapshot: origin snapshot %.80q: want 64 lower-case hex digits", o.Snapshot)
		}
	}
	if len(s.Message) > MaxMessageLen {
		return errf(ErrTooLarge, "snapshot: message of %d bytes, over %d", len(s.Message), MaxMessageLen)
	}
	if !utf8.ValidString(s.Message) {
		return errf(ErrInvalid, "snapshot: message is not valid UTF-8")
	}
	if len(s.Handles) > MaxHandles {
		return errf(ErrTooLarge, "snapshot: %d handles, over %d", len(s.Handles), MaxHandles)
	}
	for provider, h := range s.Handles {
		if err := checkHandleText(provider, true); err != nil {
			return wrapf(err, "snapshot: handle provider %.80q", provider)
		}
		if err := checkHandleText(h.ID, true); err != nil {
			return wrapf(err, "snapshot: handle %q: id %.80q", provider, h.ID)
		}
		if err := checkHandleText(h.Through, false); err != nil {
			return wrapf(err, "snapshot: handle %q: through %.80q", provider, h.Through)
		}
	}
	if s.Layout != nil {
		if s.Layout.IsEmpty() {
			return errf(ErrInvalid, "snapshot: empty layout (omit it)")
		}
		if err := s.Layout.Validate(); err != nil {
			return wrapf(err, "snapshot")
		}
	}
	if s.Root.IsZero() {
		return errf(ErrInvalid, "snapshot: zero root ref")
	}
	return nil
}

func checkHandleText(s string, required bool) error {
	switch {
	case s == "" && required:
		return errf(ErrInvalid, "empty")
	case len(s) > MaxHandleLen:
		return errf(ErrTooLarge, "%d bytes, over %d", len(s), MaxHandleLen)
	case !utf8.ValidString(s):
		return errf(ErrInvalid, "not valid UTF-8")
	}
	return nil
}

func isSnapshotID(s string) bool {
	if len(s) != 2*len(cas.Ref{}) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
