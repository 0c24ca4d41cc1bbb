package fork_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/manifest"
)

const nativeDir = "../testdata/native"

func TestValidateNativePath(t *testing.T) {
	for _, tc := range []struct {
		path string
		ok   bool
	}{
		{"workspace/main.go", true},
		{"workspace/a/b/c.txt", true},
		{"workspace/.git/config", true},
		{"workspace/.conversation/x.json", false},
		{"workspace/.conversation", false},
		{"workspace/.checkpoint-3", false},
		{"workspace/.checkpoint-3/file", false},
		{"workspace/sub/.checkpoint-3", true},
		{"workspace", false},
		{"workspace/", false},
		{"claude/projects/-work/abc.jsonl", true},
		{"claude/projects/abc.jsonl", true},
		{"claude/projects/-work/abc.json", false},
		{"claude/projects/-work/.jsonl", false},
		{"claude/settings.json", false},
		{"codex/sessions/2025/01/02/rollout-x.jsonl", true},
		{"codex/config.toml", false},
		{"codex/archived_sessions/r.jsonl", false},
		{"pi/sessions/--work--/t_id.jsonl", true},
		{"pi/auth.json", false},
		{"other/x.jsonl", false},
		{"workspace/a\\b", false},
		{"workspace//a", false},
		{"workspace/./a", false},
		{"workspace/../a", false},
		{"/workspace/a", false},
		{"workspace/a/", false},
		{"workspace/a\x00b", false},
		{"", false},
	} {
		err := fork.ValidateNativePath(tc.path)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateNativePath(%q) = %v, want ok=%v", tc.path, err, tc.ok)
		}
		if err != nil && !errors.Is(err, fork.ErrNative) {
			t.Errorf("ValidateNativePath(%q): %v does not wrap ErrNative", tc.path, err)
		}
	}
}

func TestNativePathMapping(t *testing.T) {
	for native, session := range map[string]string{
		"workspace/a.go":                 "workspace/a.go",
		"claude/projects/-w/u.jsonl":     "claude/projects/-w/u.jsonl",
		"codex/sessions/2025/01/r.jsonl": "codex-home/sessions/2025/01/r.jsonl",
		"pi/sessions/--w--/t_id.jsonl":   "pi/sessions/--w--/t_id.jsonl",
	} {
		got, err := fork.NativeToSession(native)
		if err != nil || got != session {
			t.Errorf("NativeToSession(%q) = %q, %v; want %q", native, got, err, session)
		}
		back, ok := fork.SessionToNative(session)
		if !ok || back != native {
			t.Errorf("SessionToNative(%q) = %q, %v; want %q", session, back, ok, native)
		}
	}
	for _, p := range []string{"codex-home/state_5.sqlite", "codex-home/archived_sessions/r.jsonl", "tutti-agent-home/sessions/r.jsonl", "pi/auth.json", "workspace/.conversation/x"} {
		if np, ok := fork.SessionToNative(p); ok {
			t.Errorf("SessionToNative(%q) = %q: want left out", p, np)
		}
	}
}

var zeroKey = "blobs/" + strings.Repeat("0", 64)

func TestDecodeNative(t *testing.T) {
	valid := `{"version":2,"handles":{"codex":{"id":"x","through":"3"}},"files":{"workspace/a":{"key":"` + zeroKey + `","bytes":1,"mode":420}}}`
	if _, err := fork.DecodeNative([]byte(valid)); err != nil {
		t.Fatalf("valid: %v", err)
	}
	for name, doc := range map[string]string{
		"version 1":       strings.Replace(valid, `"version":2`, `"version":1`, 1),
		"no version":      strings.Replace(valid, `"version":2,`, ``, 1),
		"no handles":      `{"version":2,"files":{}}`,
		"no files":        `{"version":2,"handles":{}}`,
		"unknown field":   strings.Replace(valid, `"version":2`, `"version":2,"extra":1`, 1),
		"unknown in file": strings.Replace(valid, `"bytes":1`, `"bytes":1,"sha":"x"`, 1),
		"blobStore other": strings.Replace(valid, `"version":2`, `"version":2,"blobStore":"s3"`, 1),
		"handle provider": strings.Replace(valid, `"codex"`, `"gemini"`, 1),
		"handle no id":    strings.Replace(valid, `"id":"x",`, ``, 1),
		"handle empty id": strings.Replace(valid, `"id":"x"`, `"id":" "`, 1),
		"handle no thru":  strings.Replace(valid, `,"through":"3"`, ``, 1),
		"key upper hex":   strings.Replace(valid, zeroKey, "blobs/"+strings.Repeat("A", 64), 1),
		"key short":       strings.Replace(valid, zeroKey, "blobs/00", 1),
		"key elsewhere":   strings.Replace(valid, zeroKey, "../"+strings.Repeat("0", 64), 1),
		"negative bytes":  strings.Replace(valid, `"bytes":1`, `"bytes":-1`, 1),
		"float bytes":     strings.Replace(valid, `"bytes":1`, `"bytes":1.5`, 1),
		"mode too big":    strings.Replace(valid, `"mode":420`, `"mode":512`, 1),
		"mode negative":   strings.Replace(valid, `"mode":420`, `"mode":-1`, 1),
		"bad path":        strings.Replace(valid, `workspace/a`, `workspace/../a`, 1),
		"backslash":       strings.Replace(valid, `workspace/a`, `workspace/a\\b`, 1),
		"disallowed":      strings.Replace(valid, `workspace/a`, `codex/config.toml`, 1),
		"file and dir":    strings.Replace(valid, `}}}`, `},"workspace/a/b":{"key":"`+zeroKey+`","bytes":1}}}`, 1),
		"one key 2 sizes": strings.Replace(valid, `}}}`, `},"workspace/b":{"key":"`+zeroKey+`","bytes":2}}}`, 1),
		"duplicate path":  strings.Replace(valid, `}}}`, `},"workspace/a":{"key":"`+zeroKey+`","bytes":1}}}`, 1),
		"trailing":        valid + `{}`,
		"not an object":   `[]`,
		"empty":           ``,
	} {
		if _, err := fork.DecodeNative([]byte(doc)); !errors.Is(err, fork.ErrNative) {
			t.Errorf("%s: DecodeNative = %v, want ErrNative", name, err)
		}
	}
}

// nativeFixture is the content of testdata/native/basic: path → content.
var nativeFixture = map[string]string{
	"workspace/main.go":                            "package main\n",
	"workspace/empty":                              "",
	"workspace/big.bin":                            strings.Repeat("0123456789abcdef", 9000), // > 2 chunks
	"workspace/dup.txt":                            "same\n",
	"workspace/dup2.txt":                           "same\n",
	"claude/projects/-work/" + idClaude + ".jsonl": `{"type":"user","sessionId":"` + idClaude + `"}` + "\n",
	"codex/sessions/2025/01/02/rollout-2025-01-02T03-04-05-" + idChild + ".jsonl": codexMeta(idChild, "", 0),
	"pi/sessions/--work--/2025_" + idPi + ".jsonl":                                `{"type":"session","id":"` + idPi + `"}` + "\n",
}

func writeNativeFixture(t *testing.T, dir string) {
	t.Helper()
	s := fork.NativeSnapshot{Version: 2, Handles: map[string]fork.NativeHandle{"codex": {ID: idChild, Through: "0"}}, Files: map[string]fork.NativeFile{}}
	for p, content := range nativeFixture {
		sum := sha256.Sum256([]byte(content))
		key := "blobs/" + hex.EncodeToString(sum[:])
		mode := uint32(0o644)
		if strings.HasSuffix(p, ".go") {
			mode = 0o755
		}
		s.Files[p] = fork.NativeFile{Key: key, Bytes: int64(len(content)), Mode: &mode}
		if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(key)), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.MarshalIndent(&s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fork.NativeManifestName), append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestNativeFixture(t *testing.T) {
	dir := filepath.Join(nativeDir, "basic")
	if *update {
		os.RemoveAll(dir)
		writeNativeFixture(t, dir)
	}
	tmp := t.TempDir()
	writeNativeFixture(t, tmp)
	want, _ := os.ReadFile(filepath.Join(tmp, fork.NativeManifestName))
	got, err := os.ReadFile(filepath.Join(dir, fork.NativeManifestName))
	if err != nil || string(got) != string(want) {
		t.Fatalf("%s differs from the generator (run go test ./fork -run TestNativeFixture -update): %v", dir, err)
	}
}

// TestNativeRoundTrip: import, export, and the JSON comes back the same,
// with what the format cannot hold listed as left out.
func TestNativeRoundTrip(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(nativeDir, "basic")
	js, err := os.ReadFile(filepath.Join(dir, fork.NativeManifestName))
	if err != nil {
		t.Fatal(err)
	}
	store := cas.NewMemory()
	root, handles, err := fork.ImportNative(ctx, store, js, dir)
	if err != nil {
		t.Fatal(err)
	}
	if handles["codex"].ID != idChild {
		t.Errorf("handles %v", handles)
	}
	// The Codex session lands in the session's codex home.
	if e := entryAt(t, store, root, "codex-home/sessions/2025/01/02/rollout-2025-01-02T03-04-05-"+idChild+".jsonl"); e == nil {
		t.Fatal("codex rollout not under codex-home/sessions")
	}
	// Same import, same root.
	if again, _, err := fork.ImportNative(ctx, store, js, dir); err != nil || again != root {
		t.Fatalf("second import: %s, %v; want %s", again.Short(), err, root.Short())
	}
	// Add what the format cannot hold, then export.
	extra := map[string]string{
		"codex-home/state_5.sqlite":            "db",
		"codex-home/archived_sessions/r.jsonl": "{}\n",
		"workspace/.conversation/turns.json":   "{}",
		"workspace/.checkpoint-1":              "x",
		"tutti-agent-home/sessions/a/b.jsonl":  "{}\n",
	}
	for p, c := range extra {
		root = putAt(t, store, root, p, c)
	}
	out := t.TempDir()
	left, err := fork.ExportNative(ctx, store, root, map[string]manifest.Handle{"codex": handles["codex"], "tutti-agent": {ID: "t"}}, out)
	if err != nil {
		t.Fatal(err)
	}
	wantLeft := []string{"codex-home/archived_sessions/", "codex-home/state_5.sqlite", "handle tutti-agent", "tutti-agent-home/", "workspace/.checkpoint-1", "workspace/.conversation/"}
	slices.Sort(left)
	if !slices.Equal(left, wantLeft) {
		t.Errorf("left out %q, want %q", left, wantLeft)
	}
	got, err := os.ReadFile(filepath.Join(out, fork.NativeManifestName))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(js) {
		t.Errorf("exported JSON differs:\n%s\nwant\n%s", got, js)
	}
	// And the export imports again to the original root.
	if r2, _, err := fork.ImportNative(ctx, cas.NewMemory(), got, out); err != nil {
		t.Fatal(err)
	} else if _, _, err := fork.ImportNative(ctx, store, got, out); err != nil || r2.IsZero() {
		t.Fatal(err)
	}
}

func putAt(t *testing.T, store cas.Store, root cas.Ref, p, content string) cas.Ref {
	t.Helper()
	ctx := context.Background()
	e, _, err := fork.PutFile(ctx, store, strings.NewReader(content))
	if err != nil {
		t.Fatal(err)
	}
	nr, err := forktestEdit(ctx, store, root, p, &e)
	if err != nil {
		t.Fatal(err)
	}
	return nr
}

// TestImportNativeChecksEveryBlobFirst: a wrong size or digest anywhere
// fails the import before a single chunk is written.
func TestImportNativeChecksEveryBlobFirst(t *testing.T) {
	ctx := context.Background()
	for name, damage := range map[string]func(dir, key string){
		"digest":  func(dir, key string) { os.WriteFile(filepath.Join(dir, key), []byte("package mane\n"), 0o644) },
		"size":    func(dir, key string) { os.WriteFile(filepath.Join(dir, key), []byte("package main\n\n"), 0o644) },
		"missing": func(dir, key string) { os.Remove(filepath.Join(dir, key)) },
		"not a file": func(dir, key string) {
			os.Remove(filepath.Join(dir, key))
			os.Mkdir(filepath.Join(dir, key), 0o755)
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			writeNativeFixture(t, dir)
			sum := sha256.Sum256([]byte(nativeFixture["workspace/main.go"]))
			damage(dir, "blobs/"+hex.EncodeToString(sum[:]))
			js, _ := os.ReadFile(filepath.Join(dir, fork.NativeManifestName))
			store := cas.NewMemory()
			_, _, err := fork.ImportNative(ctx, store, js, dir)
			if !errors.Is(err, fork.ErrNative) {
				t.Fatalf("ImportNative: %v, want ErrNative", err)
			}
			if n := len(chunkSet(t, store)); n != 0 {
				t.Errorf("a failed import wrote %d chunks", n)
			}
		})
	}
}
