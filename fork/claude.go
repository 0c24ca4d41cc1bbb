package fork

import "encoding/json"

// Claude Code keeps one transcript per session in
// projects/<cwd with / as ->/<uuid>.jsonl; its lines carry sessionId. The
// first lines of a resumed transcript may be summaries without one, so the
// identity is the first sessionId within the first records.
func init() {
	register(Provider{
		Name:           "claude",
		Home:           "claude",
		Patterns:       []string{"projects/*/{id}.jsonl"},
		IdentityWindow: 16,
		Identify: func(rec []byte) (Identity, bool, error) {
			var r struct {
				SessionID *string `json:"sessionId"`
			}
			if json.Unmarshal(rec, &r) != nil || r.SessionID == nil || *r.SessionID == "" {
				return Identity{}, false, nil
			}
			return Identity{ID: *r.SessionID}, true, nil
		},
		Through: func(last []byte) string { return stringField(last, "uuid") },
	})
}

// stringField returns the top-level string field key of a JSON object, ""
// if absent or not a string.
func stringField(rec []byte, key string) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(rec, &m) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(m[key], &s) != nil {
		return ""
	}
	return s
}
