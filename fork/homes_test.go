package fork_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/fork/forktest"
	"github.com/homefs/homefs/manifest"
)

// treeOf stores a tree holding files (path → content; a path ending in
// "/" is an empty directory).
func treeOf(t *testing.T, store cas.Store, files map[string]string) cas.Ref {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, p)
		if strings.HasSuffix(p, "/") {
			if err := os.MkdirAll(full, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	root, err := forktest.LoadDir(context.Background(), store, dir)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func TestHomes(t *testing.T) {
	ws := &manifest.Layout{Workspace: &manifest.Place{Subtree: "workspace", At: "/w"}}
	for _, tc := range []struct {
		name   string
		files  map[string]string
		layout *manifest.Layout
		want   string // subtree=provider, comma-separated
	}{
		{"default codex home", map[string]string{"codex-home/config.toml": "", "codex-home/sessions/": ""}, nil, "codex-home=codex"},
		{"codex home named home", map[string]string{"home/config.toml": "", "home/sessions/2025/": ""}, nil, "home=codex"},
		{"codex home at the root", map[string]string{"state_5.sqlite": "", "sessions/": ""}, nil, "=codex"},
		{"two levels down", map[string]string{"u/.codex/installation_id": "x"}, nil, "u/.codex=codex"},
		{"three levels down is not searched", map[string]string{"a/b/c/state_5.sqlite": ""}, nil, ""},
		{"tutti by its name", map[string]string{"tutti-agent-home/state_5.sqlite": ""}, nil, "tutti-agent-home=tutti-agent"},
		{"claude", map[string]string{".claude/projects/-srv-repo/x.jsonl": "{}\n", ".claude/settings.json": "{}"}, nil, ".claude=claude"},
		{"claude by its project folders", map[string]string{"c/projects/-srv-repo/x.jsonl": "{}\n"}, nil, "c=claude"},
		{"pi", map[string]string{"agent/sessions/--srv-repo--/1_x.jsonl": "{}\n"}, nil, "agent=pi"},
		{"pi by its config", map[string]string{"p/models.json": "{}", "p/sessions/": ""}, nil, "p=pi"},
		{"three homes", map[string]string{"codex-home/state_5.sqlite": "", "claude/projects/-a/x.jsonl": "", "claude/.claude.json": "", "pi/sessions/--a--/": ""}, nil, "claude=claude,codex-home=codex,pi=pi"},
		{"not in node_modules", map[string]string{"node_modules/x/state_5.sqlite": ""}, nil, ""},
		{"not a bare config.toml", map[string]string{"proj/config.toml": ""}, nil, ""},
		{"not inside the workspace", map[string]string{"workspace/config.toml": "", "workspace/sessions/": ""}, ws, ""},
		{"recorded, whatever it holds", map[string]string{"x/": ""}, &manifest.Layout{Homes: []manifest.Place{{Subtree: "x", Provider: "codex"}}}, "x=codex"},
		{"not the usual workspace either", map[string]string{"workspace/config.toml": "", "workspace/sessions/": ""}, nil, ""},
		{"a fresh claude home", map[string]string{"cc/.claude.json": "{}"}, nil, "cc=claude"},
		{"a recorded provider's look-alike is not a home", map[string]string{"backup/installation_id": "x", "zz/": ""}, &manifest.Layout{Homes: []manifest.Place{{Subtree: "zz", Provider: "codex"}}}, "zz=codex"},
		{"recorded wins over content", map[string]string{"x/state_5.sqlite": ""}, &manifest.Layout{Homes: []manifest.Place{{Subtree: "x", Provider: "tutti-agent"}}}, "x=tutti-agent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := cas.NewMemory()
			root := treeOf(t, store, tc.files)
			homes, err := fork.Homes(context.Background(), store, root, tc.layout)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, h := range homes {
				got = append(got, h.Subtree+"="+h.Provider)
			}
			if g := strings.Join(got, ","); g != tc.want {
				t.Errorf("homes %q, want %q", g, tc.want)
			}
		})
	}
}

// readLog is a Getter that records the refs read through it.
type readLog struct {
	cas.Getter
	read map[cas.Ref]bool
}

func (r *readLog) Get(ctx context.Context, ref cas.Ref) ([]byte, error) {
	r.read[ref] = true
	return r.Getter.Get(ctx, ref)
}

// entryRef is the tree of the directory at path below root.
func entryRef(t *testing.T, g cas.Getter, root cas.Ref, path string) cas.Ref {
	t.Helper()
	ref := root
	for _, name := range strings.Split(path, "/") {
		tree, err := manifest.GetTree(context.Background(), g, ref)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(tree.Entries, func(e manifest.Entry) bool { return e.Name == name })
		if i < 0 {
			t.Fatalf("%s: no %s", path, name)
		}
		ref = tree.Entries[i].Tree
	}
	return ref
}

// A HomeFinder reads a directory it searched before under the same ref
// and name no more, and finds what a changed directory holds now.
func TestHomeFinderRemembers(t *testing.T) {
	ctx := context.Background()
	store := cas.NewMemory()
	files := map[string]string{
		"rollout.jsonl": "{}\n", "home/config.toml": "", "home/sessions/2025/": "",
		"src/a/x.go": "a", "src/b/y.go": "b", "src/c/d/z.go": "c",
	}
	var f fork.HomeFinder
	search := func(root cas.Ref) (string, map[cas.Ref]bool) {
		t.Helper()
		log := &readLog{Getter: store, read: make(map[cas.Ref]bool)}
		homes, err := f.Homes(ctx, log, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		want, err := fork.Homes(ctx, store, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(homes, want) {
			t.Errorf("HomeFinder found %v, Homes %v", homes, want)
		}
		var got []string
		for _, h := range homes {
			got = append(got, h.Subtree+"="+h.Provider)
		}
		return strings.Join(got, ","), log.read
	}
	first := treeOf(t, store, files)
	if got, _ := search(first); got != "home=codex" {
		t.Fatalf("homes %q, want home=codex", got)
	}

	files["rollout.jsonl"] = "{}\n{}\n" // a new root; every directory stays
	second := treeOf(t, store, files)
	got, read := search(second)
	if got != "home=codex" {
		t.Errorf("after a change of the root: homes %q, want home=codex", got)
	}
	for _, dir := range []string{"home", "src", "src/a", "src/b", "src/c"} {
		if read[entryRef(t, store, second, dir)] {
			t.Errorf("the second search read %s again", dir)
		}
	}

	files["src/b/installation_id"] = "x" // src/b becomes a Codex home
	third := treeOf(t, store, files)
	if got, _ := search(third); got != "home=codex,src/b=codex" {
		t.Errorf("after src/b changed: homes %q, want home=codex,src/b=codex", got)
	}
}

func TestDropDerivedAnyHome(t *testing.T) {
	ctx := context.Background()
	store := cas.NewMemory()
	env := forktest.NewMemEnv(store)
	env.SetRoot("s", treeOf(t, store, map[string]string{
		"home/config.toml": "", "home/sessions/": "", "home/state_5.sqlite": "db", "home/state_5.sqlite-wal": "wal",
		"home/logs_2.sqlite": "logs", "claude/projects/-srv/x.jsonl": "{}\n", "claude/settings.json": "{}",
	}))
	res, err := fork.DropDerived(ctx, env, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(res.Removed, ","); got != "home/state_5.sqlite,home/state_5.sqlite-wal" {
		t.Errorf("removed %s", got)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "claude") || !strings.Contains(res.Warnings[0], "homefs run") {
		t.Errorf("warnings %q, want one about claude", res.Warnings)
	}
	// With a canonical workspace path, Claude's home needs no warning.
	res, err = fork.DropDerived(ctx, env, "s", &manifest.Layout{Workspace: &manifest.Place{Subtree: "workspace", At: "/srv"}})
	if err != nil || len(res.Removed) != 0 || len(res.Warnings) != 0 {
		t.Errorf("again: %+v, %v", res, err)
	}
}

// A rollout lands at the same path below the target's home as below the
// source's, wherever each home is.
func TestBindBetweenHomes(t *testing.T) {
	ctx := context.Background()
	store := cas.NewMemory()
	env := forktest.NewMemEnv(store)
	const id = "0199a3b2-0000-7000-8000-000000000001"
	rel := "sessions/2025/06/01/rollout-2025-06-01T10-00-00-" + id + ".jsonl"
	env.SetRoot("src", treeOf(t, store, map[string]string{"home/" + rel: `{"type":"session_meta","payload":{"id":"` + id + `"}}` + "\n"}))
	env.SetRoot("dst", treeOf(t, store, map[string]string{}))
	res, err := fork.Bind(ctx, env, fork.BindRequest{Provider: "codex", ID: id, Source: "src", Target: "dst", SourceHome: "home", TargetHome: "."})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rollouts) != 1 || res.Rollouts[0].SourcePath != "home/"+rel || res.Rollouts[0].Path != rel {
		t.Fatalf("bound %+v", res.Rollouts)
	}
	// Bound again the other way round: identical.
	res, err = fork.Bind(ctx, env, fork.BindRequest{Provider: "codex", ID: id, Source: "dst", Target: "src", SourceHome: ".", TargetHome: "home"})
	if err != nil || res.Rollouts[0].Action != fork.ActionIdentical {
		t.Fatalf("back: %+v, %v", res, err)
	}
}
