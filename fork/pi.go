package fork

import (
	"encoding/json"
	"strings"
)

// Pi keeps sessions in sessions/--<cwd>--/<timestamp>_<uuid>.jsonl; the
// first line is {"type":"session","version":3,"id":ID,…}. Its --fork copies
// every entry into the new file, so there is no chain to follow.
func init() {
	register(Provider{
		Name:           "pi",
		Home:           "pi",
		Patterns:       []string{"sessions/*/*_{id}.jsonl"},
		IdentityWindow: 1,
		Identify: func(rec []byte) (Identity, bool, error) {
			var r struct {
				Type string  `json:"type"`
				ID   *string `json:"id"`
			}
			if json.Unmarshal(rec, &r) != nil || r.Type != "session" || r.ID == nil || *r.ID == "" {
				return Identity{}, false, nil
			}
			return Identity{ID: *r.ID}, true, nil
		},
		Through: func(last []byte) string { return stringField(last, "id") },
		Detect:  isPiHome,
		KeysOn:  "absolute workspace path (sessions/--<cwd>--/ and each session header's cwd)",
	})
}

// isPiHome: sessions/ holding a per-cwd folder (--<cwd with / as ->--), or
// Pi's models.json or auth.json beside sessions/ (and no Codex state).
func isPiHome(d Dir) (bool, error) {
	if !d.HasDir("sessions") {
		return false, nil
	}
	names, err := d.Names("sessions")
	if err != nil {
		return false, err
	}
	for _, n := range names {
		if len(n) >= 4 && strings.HasPrefix(n, "--") && strings.HasSuffix(n, "--") {
			return true, nil
		}
	}
	return (d.HasFile("models.json") || d.HasFile("auth.json")) && !d.HasFile("config.toml"), nil
}
