package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, c := range []struct {
		dir, imp string
		ok       bool
	}{
		{"manifest", "cas", true},
		{"cas", "manifest", false},
		{"internal/catalog", "manifest", true},
		{"manifest", "internal/catalog", false},
		{"fusefs", "internal/catalog", true},
		{"fusefs", "fusefs/uring", true},  // its own subpackage
		{"fusefs/uring", "fusefs", false}, // its parent
		{"fusefs", "fork", false},         // a package of its own layer
		{"internal/remote", "fusefs", false},
		{"internal/daemon", "fusefs", true},
		{"fusefs", "internal/daemon", false},
		{"internal/api", "internal/remote", true},
		{"internal/daemon", "internal/api", true},
		{"cmd/homefs", "internal/api", true},
		{"cmd/homefs", "internal/daemon", false}, // the CLI links no server
		{"internal/daemon", "cmd/homefs", false},
		{"cmd/homefsd", "internal/daemon", true},
		{"cmd/homefs", "cmd/homefsd", false},
		{"fusefs", "internal/mountinfo", true},                   // a leaf
		{"internal/atomicfile", "cas", false},                    // a leaf imports nothing
		{"internal/remote/s3", "internal/remote/objstore", true}, // a layer listed below its parent's
		{"internal/remote/s3", "internal/remote", false},         // a sibling of its own layer
		{"internal/daemon", "internal/testkit/codextest", false},
		{"fusefs", "fusefs/fusefstest", false},
		{"fusefs/fusefstest", "fusefs", true},
		{"cas/castest", "cas/internal/gen", true},
		{"cas/badgerstore", "cas", true}, // a layer above cas's, not a subpackage
		{"cas/badgerstore", "cas/internal/suspect", true},
		{"cas/badgerstore", "cas/stored", true},
		{"cas/stored", "cas/badgerstore", false},
		{"internal/testkit/pitest", "internal/testkit/testuser", true},
		{"cmd/homefs", "internal/benchreport", false},
		{"internal/newpkg", "cas", false}, // unclassified
		{"cas", "internal/newpkg", false},
	} {
		err := check(c.dir, c.imp)
		if (err == nil) != c.ok {
			t.Errorf("check(%q, %q) = %v, want allowed %v", c.dir, c.imp, err, c.ok)
		}
	}
}

// The module as it is keeps the rule.
func TestModule(t *testing.T) {
	bad, err := scan("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// An import against the layers, in a module laid out as this one, is
// found.
func TestScanFindsUpwardImport(t *testing.T) {
	root := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		p := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.24\n")
	write("cas/cas.go", "package cas\n\nimport _ \"example.com/m/manifest\"\n")
	write("manifest/manifest.go", "package manifest\n\nimport _ \"example.com/m/cas\"\n")
	write("manifest/manifest_test.go", "package manifest\n\nimport _ \"example.com/m/fusefs\"\n")
	bad, err := scan(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) != 1 {
		t.Fatalf("found %q, want cas's import of manifest alone (a test may import anything)", bad)
	}
}
