package fork

import (
	"encoding/json"
	"fmt"
)

// codexHome is where Codex's CODEX_HOME sits inside a session.
const codexHome = "codex-home"

// codexDerived are the SQLite databases Codex derives from its rollouts
// and that go stale or dangerous when the home is bound or mounted
// elsewhere: state_5 records each rollout's absolute path (a resumed copy
// appended to the ORIGINAL home's rollout), thread_history_1 indexes
// rollouts by byte offset (wrong once a rollout is replaced). Codex
// rebuilds both from sessions/. The other four (logs_2, goals_1,
// memories_1, queue_1) hold no rollout paths and may hold the user's
// data, so they stay.
var codexDerived = []string{
	"state_5.sqlite", "state_5.sqlite-wal", "state_5.sqlite-shm", "state_5.sqlite-journal",
	"thread_history_1.sqlite", "thread_history_1.sqlite-wal", "thread_history_1.sqlite-shm", "thread_history_1.sqlite-journal",
}

func init() { register(codexFormat("codex", codexHome)) }

// codexFormat is the provider description shared by Codex and the
// harnesses that write its rollout format under another home.
func codexFormat(name, home string) Provider {
	return Provider{
		Name: name,
		Home: home,
		Patterns: []string{
			"sessions/**/*{id}*.jsonl",
			"archived_sessions/**/*{id}*.jsonl",
		},
		IdentityWindow: 1,
		Identify:       codexIdentify,
		Through:        codexThrough,
		Chain:          true,
		Derived:        codexDerived,
		Detect:         isCodexHome,
	}
}

// isCodexHome: Codex's state database or installation id, or its
// config.toml beside sessions/ or archived_sessions/.
func isCodexHome(d Dir) (bool, error) {
	if d.HasFile("state_5.sqlite") || d.HasFile("installation_id") {
		return true, nil
	}
	return d.HasFile("config.toml") && (d.HasDir("sessions") || d.HasDir("archived_sessions")), nil
}

// codexIdentify reads {"type":"session_meta","payload":{"id"|"session_id":
// ID, "forked_from_id"?, "history_base"?}}.
func codexIdentify(rec []byte) (Identity, bool, error) {
	var r struct {
		Type    string          `json:"type"`
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(rec, &r); err != nil || r.Type != "session_meta" {
		return Identity{}, false, nil
	}
	var p struct {
		ID          *string      `json:"id"`
		SessionID   *string      `json:"session_id"`
		ForkedFrom  *string      `json:"forked_from_id"`
		HistoryBase *HistoryBase `json:"history_base"`
	}
	if err := json.Unmarshal(r.Payload, &p); err != nil {
		return Identity{}, false, fmt.Errorf("session_meta payload: %w", err)
	}
	var id Identity
	switch {
	case p.ID != nil && *p.ID != "":
		id.ID = *p.ID
	case p.SessionID != nil && *p.SessionID != "":
		id.ID = *p.SessionID
	default:
		return Identity{}, false, nil
	}
	if p.ForkedFrom != nil {
		id.ForkedFrom = *p.ForkedFrom
	}
	if hb := p.HistoryBase; hb != nil {
		if hb.EndByteOffset < 0 || hb.EndOrdinalExclusive < 0 {
			return Identity{}, false, fmt.Errorf("session_meta history_base: negative offset")
		}
		id.HistoryBase = hb
	}
	return id, true, nil
}

// codexThrough is the ordinal of the last record: the record a resume
// continues after.
func codexThrough(last []byte) string {
	var r struct {
		Ordinal json.Number `json:"ordinal"`
	}
	if json.Unmarshal(last, &r) != nil {
		return ""
	}
	return r.Ordinal.String()
}
