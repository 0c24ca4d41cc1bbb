package fork_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "regenerate testdata/rollouts")

// fixtureDir holds one directory per bind case: source/ and target/ are
// session trees, want.json what Bind must do.
const fixtureDir = "../testdata/rollouts"

// Fixed ids and times: fixtures regenerate byte for byte.
const (
	idChild  = "0199a000-0000-7000-8000-000000000c01"
	idParent = "0199a000-0000-7000-8000-000000000b01"
	idGrand  = "0199a000-0000-7000-8000-000000000a01"
	idOther  = "0199a000-0000-7000-8000-000000000e01"
	idClaude = "5b1c0d2e-0000-4000-8000-000000000d01"
	idPi     = "0199a000-0000-7000-8000-000000000f01"
)

var epoch = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

type want struct {
	Provider string      `json:"provider"`
	ID       string      `json:"id"`
	Error    string      `json:"error,omitempty"` // the sentinel's name
	Rollouts []wantBound `json:"rollouts,omitempty"`
	Removed  []string    `json:"removed,omitempty"`
	Through  string      `json:"through,omitempty"`
	Notes    string      `json:"notes"`
}

type wantBound struct {
	ID     string `json:"id"`
	Path   string `json:"path"`
	Action string `json:"action"`
}

// codexMeta is the first record of a Codex rollout.
func codexMeta(id, forkedFrom string, hbOffset int64) string {
	p := map[string]any{
		"id": id, "cwd": "/work/project", "cli_version": "0.169.0",
		"source": "exec", "model_provider": "mock", "timestamp": epoch.Format(time.RFC3339Nano),
	}
	if forkedFrom != "" {
		p["forked_from_id"] = forkedFrom
		p["history_base"] = map[string]any{"thread_id": forkedFrom, "end_ordinal_exclusive": 3, "end_byte_offset": hbOffset}
	}
	return record(0, "session_meta", p)
}

func record(ordinal int, typ string, payload any) string {
	b, err := json.Marshal(map[string]any{
		"timestamp": epoch.Add(time.Duration(ordinal) * time.Second).Format("2006-01-02T15:04:05.000Z"),
		"ordinal":   ordinal,
		"type":      typ,
		"payload":   payload,
	})
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

// codexRollout is a rollout of n records after session_meta, each about
// size bytes, its text derived from seed.
func codexRollout(meta string, n, size int, seed string) string {
	var b strings.Builder
	b.WriteString(meta)
	for i := 1; i <= n; i++ {
		text := fmt.Sprintf("%s turn %d ", seed, i)
		text += strings.Repeat(string(rune('a'+i%26)), max(0, size-len(text)))
		b.WriteString(record(i, "response_item", map[string]any{
			"type": "message", "role": []string{"user", "assistant"}[i%2],
			"content": []map[string]string{{"type": "output_text", "text": text}},
		}))
	}
	return b.String()
}

func codexPath(day int, id string) string {
	return fmt.Sprintf("codex-home/sessions/2025/01/%02d/rollout-2025-01-%02dT03-04-05-%s.jsonl", day, day, id)
}

// lineEnd returns the offset just after the k-th newline of s.
func lineEnd(s string, k int) int {
	off := 0
	for i := 0; i < k; i++ {
		off += strings.IndexByte(s[off:], '\n') + 1
	}
	return off
}

type fixture struct {
	name   string
	source map[string]string // path → content; "->target" makes a symlink
	target map[string]string
	want   want
}

func fixtures() []fixture {
	big := codexRollout(codexMeta(idChild, "", 0), 120, 500, "src") // ~80 KB: two chunks
	// The target resumed further: 20 more records after the source's.
	longer := codexRollout(codexMeta(idChild, "", 0), 130, 500, "src")
	prefix := big[:lineEnd(big, 110)]      // cut at a line end in chunk 1
	damaged := big[:lineEnd(big, 110)+300] // cut inside a line
	diverged := big[:lineEnd(big, 115)] + record(115, "response_item", map[string]any{"type": "message", "text": "something else"})
	damagedOther := big[:lineEnd(big, 10)] + `{"timestamp":"2025-01-02T03:04:16.000Z","ordinal":11,"type":"respo`
	small := codexRollout(codexMeta(idChild, "", 0), 4, 80, "small")
	state := "SQLite format 3\x00 derived state naming /old/mount/codex-home/sessions"
	grand := codexRollout(codexMeta(idGrand, "", 0), 5, 60, "grand")
	parent := codexRollout(codexMeta(idParent, idGrand, int64(lineEnd(grand, 3))), 4, 60, "parent")
	child := codexRollout(codexMeta(idChild, idParent, int64(lineEnd(parent, 3))), 3, 60, "child")
	claude := `{"type":"summary","summary":"earlier work","leafUuid":"u0"}` + "\n" +
		`{"type":"user","sessionId":"` + idClaude + `","uuid":"u1","message":{"role":"user","content":"hi"}}` + "\n" +
		`{"type":"assistant","sessionId":"` + idClaude + `","uuid":"u2","message":{"role":"assistant","content":"hello"}}` + "\n"
	pi := `{"type":"session","version":3,"id":"` + idPi + `","timestamp":"2025-01-02T03:04:05.000Z","cwd":"/work/project"}` + "\n" +
		`{"type":"message","id":"e1","parentId":null,"message":{"role":"user","content":"hi"}}` + "\n"
	wrong := codexRollout(codexMeta(idOther, "", 0), 3, 60, "other")

	p1 := codexPath(2, idChild)
	add := func(id, path, action string) wantBound { return wantBound{ID: id, Path: path, Action: action} }
	w := func(e string, notes string, bs ...wantBound) want {
		return want{Provider: "codex", ID: idChild, Error: e, Rollouts: bs, Notes: notes}
	}
	return []fixture{
		{"identical", map[string]string{p1: big}, map[string]string{p1: big},
			w("", "target holds the same bytes: nothing to place", add(idChild, p1, "identical"))},
		{"target-longer", map[string]string{p1: big}, map[string]string{p1: longer},
			w("", "target resumed further: the source is a prefix of it, keep it", add(idChild, p1, "keep"))},
		{"target-prefix", map[string]string{p1: big}, map[string]string{p1: prefix},
			w("", "target is a strict prefix ending at a line end inside chunk 1: replace", add(idChild, p1, "replace"))},
		{"damaged-prefix", map[string]string{p1: big}, map[string]string{p1: damaged},
			w("", "target is a prefix cut inside a line (damaged): replace", add(idChild, p1, "replace"))},
		{"damaged-not-prefix", map[string]string{p1: big}, map[string]string{p1: damagedOther},
			w("ErrDiverged", "target is damaged and not a prefix of the source: refuse")},
		{"diverged", map[string]string{p1: big}, map[string]string{p1: diverged},
			w("ErrDiverged", "target differs from the source after record 114, in chunk 1: refuse")},
		{"missing", map[string]string{codexPath(2, idOther): wrong}, nil,
			w("ErrNotFound", "no rollout of the id in the source")},
		{"archived", map[string]string{"codex-home/archived_sessions/rollout-2025-01-02T03-04-05-" + idChild + ".jsonl": small}, nil,
			w("", "the source archived it; it lands at the same path", add(idChild, "codex-home/archived_sessions/rollout-2025-01-02T03-04-05-"+idChild+".jsonl", "add"))},
		{"two-matches", map[string]string{p1: small, codexPath(3, idChild): small}, nil,
			w("ErrAmbiguous", "two source rollouts carry the id")},
		{"wrong-identity", map[string]string{p1: wrong}, nil,
			w("ErrNotFound", "the name carries the id, the first record another")},
		{"symlinked", map[string]string{p1: "->../../../../elsewhere/child.jsonl", "elsewhere/child.jsonl": small}, nil,
			w("ErrNotFound", "the only match is a symlink: ignored")},
		{"add", map[string]string{p1: small}, map[string]string{"codex-home/state_5.sqlite": state, "codex-home/state_5.sqlite-wal": state},
			want{Provider: "codex", ID: idChild, Rollouts: []wantBound{add(idChild, p1, "add")},
				Removed: []string{"codex-home/state_5.sqlite", "codex-home/state_5.sqlite-wal"}, Through: "4",
				Notes: "empty target: placed; derived state dropped"}},
		{"target-other-path", map[string]string{p1: small}, map[string]string{codexPath(5, idChild): small[:lineEnd(small, 2)]},
			w("", "target keeps its own path for the rollout and gets the source's bytes there", add(idChild, codexPath(5, idChild), "replace"))},
		{"target-two-matches", map[string]string{p1: small}, map[string]string{p1: small, codexPath(3, idChild): small},
			w("ErrAmbiguous", "two target rollouts carry the id")},
		{"target-unreadable", map[string]string{p1: small}, map[string]string{p1: small[:40]},
			w("ErrDamaged", "target damaged in its first record: identity unreadable")},
		{"target-occupied", map[string]string{p1: small}, map[string]string{p1: "not a rollout\n"},
			w("ErrDamaged", "a file at the path whose first line is not JSON")},
		{"target-wrong-identity", map[string]string{p1: small}, map[string]string{p1: wrong},
			w("ErrDiverged", "the target's file at the path records another session: never overwritten")},
		{"damaged-source", map[string]string{p1: small + "{\"cut\n"}, nil,
			w("ErrDamaged", "the source has a line that is not a JSON object")},
		{"chain", map[string]string{p1: child, codexPath(1, idParent): parent, codexPath(1, idGrand): grand}, nil,
			w("", "codex fork by reference: ancestors come along, oldest first",
				add(idGrand, codexPath(1, idGrand), "add"), add(idParent, codexPath(1, idParent), "add"), add(idChild, p1, "add"))},
		{"chain-missing-parent", map[string]string{p1: child, codexPath(1, idGrand): grand}, nil,
			w("ErrNotFound", "the parent the child was forked from is not in the source")},
		{"chain-short-parent", map[string]string{p1: child, codexPath(1, idParent): parent[:lineEnd(parent, 2)], codexPath(1, idGrand): grand}, nil,
			w("ErrNotFound", "the parent is shorter than the child's history_base.end_byte_offset")},
		{"claude", map[string]string{"claude/projects/-work-project/" + idClaude + ".jsonl": claude}, nil,
			want{Provider: "claude", ID: idClaude, Rollouts: []wantBound{add(idClaude, "claude/projects/-work-project/"+idClaude+".jsonl", "add")},
				Through: "u2", Notes: "claude: identity from the first record carrying sessionId"}},
		{"pi", map[string]string{"pi/sessions/--work-project--/2025-01-02T03-04-05-000Z_" + idPi + ".jsonl": pi}, nil,
			want{Provider: "pi", ID: idPi, Rollouts: []wantBound{add(idPi, "pi/sessions/--work-project--/2025-01-02T03-04-05-000Z_"+idPi+".jsonl", "add")},
				Through: "e1", Notes: "pi: identity from the session header"}},
	}
}

func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		fp := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(fp), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, fp); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(fp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFixtures regenerates testdata/rollouts with -update, and otherwise
// checks that the generator and the files agree.
func TestFixtures(t *testing.T) {
	if *update {
		if err := os.RemoveAll(fixtureDir); err != nil {
			t.Fatal(err)
		}
		for _, f := range fixtures() {
			dir := filepath.Join(fixtureDir, f.name)
			writeTree(t, filepath.Join(dir, "source"), f.source)
			writeTree(t, filepath.Join(dir, "target"), f.target)
			b, err := json.MarshalIndent(f.want, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "want.json"), append(b, '\n'), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, f := range fixtures() {
		dir := filepath.Join(fixtureDir, f.name)
		for side, files := range map[string]map[string]string{"source": f.source, "target": f.target} {
			for p, content := range files {
				fp := filepath.Join(dir, side, filepath.FromSlash(p))
				var got string
				if target, ok := strings.CutPrefix(content, "->"); ok {
					l, err := os.Readlink(fp)
					if err != nil || l != target {
						t.Errorf("%s: symlink %q, %v; want %q (run go test ./fork -run TestFixtures -update)", fp, l, err, target)
					}
					continue
				}
				b, err := os.ReadFile(fp)
				got = string(b)
				if err != nil || got != content {
					t.Errorf("%s differs from the generator (run go test ./fork -run TestFixtures -update)", fp)
				}
			}
		}
	}
}
