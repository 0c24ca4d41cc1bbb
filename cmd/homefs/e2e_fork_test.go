package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
)

// storeStats is the part of "stats --json" the tests compare.
type storeStats struct {
	Sessions   int   `json:"sessions"`
	Chunks     int64 `json:"chunks"`
	PlainBytes int64 `json:"plain_bytes"`
}

func (e *env) stats() storeStats {
	e.t.Helper()
	var st storeStats
	require.NoError(e.t, json.Unmarshal([]byte(e.ok("stats", "--json")), &st))
	return st
}

const bindID = "0199b000-0000-7000-8000-00000000a001"

// codexRollout is a Codex rollout of provider session id, large enough to
// span several chunks.
func codexRollout(id string, turns int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"type":"session_meta","payload":{"id":"%s"}}`+"\n", id)
	for i := 1; i <= turns; i++ {
		fmt.Fprintf(&b, `{"ordinal":%d,"type":"response_item","payload":{"text":"%s"}}`+"\n", i, strings.Repeat(fmt.Sprintf("turn %d ", i), 40))
	}
	return b.String()
}

func TestBind(t *testing.T) {
	e := newEnv(t)
	e.start()
	path := "codex-home/sessions/2026/01/01/rollout-2026-01-01T00-00-00-" + bindID + ".jsonl"
	content := codexRollout(bindID, 1500) // ~500 KiB
	e.runStdinOK(mkTar(t,
		tarEntry{name: "codex-home/sessions/2026/01/01/", typ: '5'},
		tarEntry{name: path, body: content},
		tarEntry{name: "workspace/README.md", body: "source\n"},
	), "import", "-", "src")
	e.ok("session", "create", "dst")
	before := e.stats()

	var res api.BindResult
	require.NoError(t, json.Unmarshal([]byte(e.ok("bind", "--provider", "codex", "--id", bindID, "src", "dst", "--json")), &res))
	require.Equal(t, "codex", res.Provider)
	require.Equal(t, bindID, res.Handle.ID)
	require.Len(t, res.Rollouts, 1)
	require.Equal(t, "add", string(res.Rollouts[0].Action))
	require.Equal(t, path, res.Rollouts[0].Path)

	// By reference: the store gained tree nodes for the new directories,
	// not a copy of the rollout.
	after := e.stats()
	require.Less(t, after.Chunks-before.Chunks, int64(12), "objects added by bind")
	require.Less(t, after.PlainBytes-before.PlainBytes, int64(len(content)/20), "bytes added by bind")

	mnt := e.mkdir("dst")
	e.ok("mount", "dst", mnt)
	require.Equal(t, content, readFile(t, filepath.Join(mnt, path)))
	_, err := os.Stat(filepath.Join(mnt, "workspace/README.md"))
	require.True(t, os.IsNotExist(err), "bind brings the rollout only")
	e.ok("unmount", mnt)

	// A capture of the target records the handle.
	var snap api.SnapshotInfo
	require.NoError(t, json.Unmarshal([]byte(e.ok("capture", "dst", "--json")), &snap))
	require.Equal(t, bindID, snap.Handles["codex"].ID)

	// Again: identical, nothing to do.
	out := e.ok("bind", "--provider", "codex", "--id", bindID, "src", "dst")
	require.Contains(t, out, "bound codex session "+bindID+" from src into dst")
	require.Contains(t, out, "identical")

	// Bad inputs.
	r := e.fails(exitUsage, "unknown provider", "bind", "--provider", "gemini", "--id", bindID, "src", "dst")
	require.Contains(t, r.stderr, "known: claude, codex, pi, tutti-agent")
	e.fails(exitUsage, "--provider is required (known: claude, codex, pi, tutti-agent)", "bind", "--id", bindID, "src", "dst")
	e.fails(exitUsage, "empty provider session id", "bind", "--provider", "codex", "--id", "  ", "src", "dst")
	e.fails(exitUsage, "--id is required", "bind", "--provider", "codex", "src", "dst")
	e.fails(exitUsage, "invalid request", "bind", "--provider", "codex", "--id", bindID, "src", "src")
	e.fails(exitUsage, "want SOURCE TARGET", "bind", "--provider", "codex", "--id", bindID, "src")
	e.fails(exitNotFound, "not found", "bind", "--provider", "codex", "--id", "0199b000-0000-7000-8000-0000000000ff", "src", "dst")
	e.fails(exitNotFound, "no such session", "bind", "--provider", "codex", "--id", bindID, "src", "nobody")

	// A target whose rollout diverges is refused, and left alone.
	diverged := codexRollout(bindID, 3) + `{"ordinal":4,"type":"response_item","payload":{"text":"elsewhere"}}` + "\n"
	e.runStdinOK(mkTar(t, tarEntry{name: path, body: diverged}), "import", "-", "div")
	e.fails(exitConflict, "diverges", "bind", "--provider", "codex", "--id", bindID, "src", "div")
	dmnt := e.mkdir("div")
	e.ok("mount", "div", dmnt, "--read-only")
	require.Equal(t, diverged, readFile(t, filepath.Join(dmnt, path)))
	e.ok("unmount", dmnt)
	require.Contains(t, e.ok("fsck"), "0 problems")
}

func TestNativeImportExport(t *testing.T) {
	e := newEnv(t)
	e.start()
	fixture, err := filepath.Abs("../../testdata/native/basic")
	require.NoError(t, err)
	manifestPath := filepath.Join(fixture, "snapshot.json")

	var imp api.ImportNativeResult
	require.NoError(t, json.Unmarshal([]byte(e.ok("import-native", manifestPath, fixture, "nat", "--json")), &imp))
	require.Equal(t, 8, imp.Files)
	require.Equal(t, "0199a000-0000-7000-8000-000000000c01", imp.Handles["codex"].ID)
	require.Contains(t, e.ok("session", "list"), "nat")
	e.fails(exitConflict, "exists", "import-native", manifestPath, fixture, "nat")

	// The Codex rollout lands in the Codex home.
	mnt := e.mkdir("nat")
	e.ok("mount", "nat", mnt)
	require.Equal(t, "package main\n", readFile(t, filepath.Join(mnt, "workspace/main.go")))
	_, err = os.Stat(filepath.Join(mnt, "codex-home/sessions/2025/01/02/rollout-2025-01-02T03-04-05-0199a000-0000-7000-8000-000000000c01.jsonl"))
	require.NoError(t, err)

	// Round trip: the same JSON comes back, nothing left out.
	snap := strings.TrimSpace(e.ok("capture", "nat"))
	out := filepath.Join(e.dir, "out")
	var exp api.ExportNativeResult
	require.NoError(t, json.Unmarshal([]byte(e.ok("export-native", snap, out, "--json")), &exp))
	require.Empty(t, exp.LeftOut)
	require.Equal(t, jsonValue(t, readFile(t, manifestPath)), jsonValue(t, readFile(t, filepath.Join(out, "snapshot.json"))))
	for _, f := range []string{"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "f0000dc6964db5766fddc06b520aaf1c26bc75b00a5fc59dfb107f6c86a17430"} {
		require.Equal(t, readFile(t, filepath.Join(fixture, "blobs", f)), readFile(t, filepath.Join(out, "blobs", f)))
	}

	// What the format cannot hold is listed.
	writeFile(t, filepath.Join(mnt, "codex-home/config.toml"), "model = \"x\"\n")
	writeFile(t, filepath.Join(mnt, "notes.txt"), "notes\n")
	snap2 := strings.TrimSpace(e.ok("capture", "nat", "--handle", "gemini=g1"))
	text := e.ok("export-native", snap2, filepath.Join(e.dir, "out2"))
	require.Contains(t, text, "left out (3, not in the native format):\n  handle gemini\n  codex-home/config.toml\n  notes.txt\n")
	e.fails(exitConflict, "not empty", "export-native", snap2, out)
	e.fails(exitUsage, "inside the homefs mount", "export-native", snap2, filepath.Join(mnt, "x"))
	e.fails(exitUsage, "inside the homefs mount", "import-native", manifestPath, mnt, "x")
	e.fails(exitNotFound, "no such snapshot", "export-native", "abcdefabcdef", filepath.Join(e.dir, "out3"))
	e.ok("unmount", mnt)

	// A bad blob: refused before anything is written.
	bad := filepath.Join(e.dir, "bad")
	require.NoError(t, os.CopyFS(bad, os.DirFS(fixture)))
	blob := filepath.Join(bad, "blobs", "f0000dc6964db5766fddc06b520aaf1c26bc75b00a5fc59dfb107f6c86a17430")
	b, err := os.ReadFile(blob)
	require.NoError(t, err)
	require.NoError(t, os.Chmod(blob, 0o644))
	b[len(b)/2] ^= 1
	require.NoError(t, os.WriteFile(blob, b, 0o644))
	before := e.stats()
	e.fails(exitUsage, "content hashes to", "import-native", filepath.Join(bad, "snapshot.json"), bad, "bad")
	e.fails(exitNotFound, "no such session", "log", "bad")
	after := e.stats()
	require.Equal(t, before.Chunks, after.Chunks, "a refused import stores nothing")

	require.NoError(t, os.Remove(blob))
	e.fails(exitNotFound, "no such file", "import-native", filepath.Join(bad, "snapshot.json"), bad, "bad")
	require.NoError(t, os.WriteFile(filepath.Join(bad, "snapshot.json"), []byte(`{"version":1}`), 0o644))
	e.fails(exitUsage, "invalid native snapshot", "import-native", filepath.Join(bad, "snapshot.json"), bad, "bad")
	e.fails(exitNotFound, "no such session", "log", "bad")
}

func jsonValue(t *testing.T, s string) any {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v))
	return v
}
