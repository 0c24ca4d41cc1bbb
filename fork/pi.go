package fork

import "encoding/json"

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
	})
}
