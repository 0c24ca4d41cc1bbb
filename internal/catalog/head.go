package catalog

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// headVersion is the version of the head encoding; DecodeHead rejects
// others.
const headVersion = 1

// Head is the mutable state of one session, stored under session/<name>.
type Head struct {
	Session string `json:"session"`
	// Root is the working tree's root as of the last flush.
	Root cas.Ref `json:"root"`
	// Snapshot is the last captured (or restored) snapshot id, "" if none;
	// the next capture's Parent.
	Snapshot string `json:"snapshot,omitempty"`
	// Origin is set when the session was forked (or created) from a
	// snapshot; the first capture copies it into its record.
	Origin  *manifest.Lineage          `json:"origin,omitempty"`
	Handles map[string]manifest.Handle `json:"handles,omitempty"`
	// Layout is where the session's parts belong (see manifest.Layout);
	// captures record it, forks and restores carry it.
	Layout    *manifest.Layout `json:"layout,omitempty"`
	CreatedNs int64            `json:"created_ns"`
	UpdatedNs int64            `json:"updated_ns"`
	// Gen counts changes to the head; SetRoot expects the current value.
	Gen uint64 `json:"gen"`
}

// headRecord is the stored form: the head with a format version.
type headRecord struct {
	Version int `json:"version"`
	Head
}

// EncodeHead returns the stored form of h. The encoding is deterministic
// (map keys sorted), which matters because commits compare stored bytes.
func EncodeHead(h *Head) ([]byte, error) {
	if err := h.validate(); err != nil {
		return nil, err
	}
	return json.Marshal(headRecord{Version: headVersion, Head: *h})
}

// DecodeHead parses and validates a stored head.
func DecodeHead(data []byte) (*Head, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var rec headRecord
	if err := dec.Decode(&rec); err != nil {
		return nil, fmt.Errorf("catalog: decode head: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("catalog: decode head: trailing data")
	}
	if rec.Version != headVersion {
		return nil, fmt.Errorf("catalog: decode head: version %d, want %d", rec.Version, headVersion)
	}
	h := rec.Head
	if err := h.validate(); err != nil {
		return nil, err
	}
	return &h, nil
}

func (h *Head) validate() error {
	if err := manifest.ValidateSessionName(h.Session); err != nil {
		return fmt.Errorf("catalog: head: session %q: %w", h.Session, err)
	}
	if h.Root.IsZero() {
		return fmt.Errorf("catalog: head %s: zero root", h.Session)
	}
	if err := h.Layout.Validate(); err != nil {
		return fmt.Errorf("catalog: head %s: %w", h.Session, err)
	}
	if h.Snapshot != "" && !isFullID(h.Snapshot) {
		return fmt.Errorf("catalog: head %s: bad snapshot id %q", h.Session, h.Snapshot)
	}
	if o := h.Origin; o != nil {
		if err := manifest.ValidateSessionName(o.Session); err != nil {
			return fmt.Errorf("catalog: head %s: origin session %q: %w", h.Session, o.Session, err)
		}
		if o.Snapshot != "" && !isFullID(o.Snapshot) {
			return fmt.Errorf("catalog: head %s: bad origin snapshot id %q", h.Session, o.Snapshot)
		}
	}
	return nil
}

// isFullID reports whether s is 64 lower-case hex digits.
func isFullID(s string) bool { return len(s) == idLen && isHex(s) }

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// mergeHandles returns base overlaid with add, or nil when both are empty.
func mergeHandles(base, add map[string]manifest.Handle) map[string]manifest.Handle {
	if len(base) == 0 && len(add) == 0 {
		return nil
	}
	m := make(map[string]manifest.Handle, len(base)+len(add))
	maps.Copy(m, base)
	maps.Copy(m, add)
	return m
}
