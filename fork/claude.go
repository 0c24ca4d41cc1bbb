package fork

import (
	"encoding/json"
	"strings"
)

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
		Detect:  isClaudeHome,
		KeysOn:  "absolute workspace path (projects/<cwd with / as ->/)",
	})
}

// isClaudeHome: Claude Code's .claude.json or .credentials.json, or
// projects/ beside one of the files and directories it keeps in its config
// dir.
func isClaudeHome(d Dir) (bool, error) {
	// A config dir before its first transcript has no projects/ yet.
	if d.HasFile(".claude.json") || d.HasFile(".credentials.json") {
		return true, nil
	}
	if !d.HasDir("projects") {
		return false, nil
	}
	for _, name := range []string{".claude.json", "settings.json", ".credentials.json", "history.jsonl", "todos", "shell-snapshots", "statsig", "session-env", "file-history", "plugins"} {
		if _, ok := d.Has(name); ok {
			return true, nil
		}
	}
	// Or transcript folders named for absolute paths ("-home-u-repo").
	names, err := d.Names("projects")
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if strings.HasPrefix(n, "-") {
			return true, nil
		}
	}
	return false, nil
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
