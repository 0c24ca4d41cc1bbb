// Command layers checks that the module's packages import only downward
// through the layers docs/ARCHITECTURE.md describes, and exits 1 if one
// does not. `make lint` runs it. Only a package's own files count: a test
// may import any package (a harness, or a package of its own layer).
//
// Usage: go run ./internal/lint/layers [dir]
package main

import (
	"errors"
	"fmt"
	"go/build"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// layers lists the module's layers from the bottom up, each by the
// directories of its packages (a package's subdirectories belong to it
// unless classified otherwise: the longest listed directory above a
// package places it). A package imports only packages of the layers below
// its own, and its own subpackages.
var layers = [][]string{
	{"cas"},
	{"cas/stored"},
	{"cas/badgerstore"},
	// remotetypes: the remote's value types and errors, which the CLI
	// links; objstore, the object store interface, names its errors.
	{"manifest", "internal/remote/remotetypes"},
	{"internal/catalog", "internal/remote/objstore"},
	{"fusefs", "fork", "internal/archive", "internal/remote", "internal/fsck"},
	{"internal/api"},
	// The CLI and the server share a layer, so that the CLI cannot link
	// the server (and with it go-fuse and Prometheus): it reaches it
	// through internal/api alone, and homefsd runs it.
	{"internal/daemon", "cmd/homefs"},
	{"cmd/homefsd"},
}

// leaves are small packages any layer may import; they import no package
// of the module.
var leaves = []string{"internal/atomicfile", "internal/fusectl", "internal/mountinfo", "internal/sdnotify", "internal/version"}

// harnesses are what tests alone import: production code never does,
// and they may import anything.
var harnesses = []string{"internal/testkit", "cas/castest", "cas/internal/gen", "fusefs/fusefstest", "fork/forktest", "internal/remote/s3test"}

// tools are the commands of make bench and make lint: nothing imports
// them.
var tools = []string{"internal/benchpeers", "internal/benchreport", "internal/lint"}

// kind is what a package is to the rule.
type kind int

const (
	unknown kind = iota
	layer
	leaf
	harness
	tool
)

// place is a package's kind and, for a layer, its index from the bottom
// and the directory that placed it.
type place struct {
	kind  kind
	level int
	root  string
}

// under reports whether dir is root or below it.
func under(dir, root string) bool { return dir == root || strings.HasPrefix(dir, root+"/") }

// classify places the package in dir (relative to the module's root).
func classify(dir string) place {
	for _, k := range []struct {
		dirs []string
		kind kind
	}{{harnesses, harness}, {tools, tool}, {leaves, leaf}} {
		for _, root := range k.dirs {
			if under(dir, root) {
				return place{kind: k.kind, root: root}
			}
		}
	}
	var p place
	for i, dirs := range layers {
		for _, root := range dirs {
			if under(dir, root) && len(root) > len(p.root) {
				p = place{kind: layer, level: i, root: root}
			}
		}
	}
	return p
}

// check returns why the package in dir may not import the one in imp
// (both relative to the module's root), or nil if it may.
func check(dir, imp string) error {
	from, to := classify(dir), classify(imp)
	switch {
	case from.kind == unknown:
		return fmt.Errorf("%s is in no layer: add it to internal/lint/layers", dir)
	case to.kind == unknown:
		return fmt.Errorf("%s is in no layer: add it to internal/lint/layers", imp)
	case to.kind == tool:
		return fmt.Errorf("%s imports %s, a command", dir, imp)
	case from.kind == harness || from.kind == tool:
		return nil
	case to.kind == harness:
		return fmt.Errorf("%s imports %s, a test harness", dir, imp)
	case from.kind == leaf:
		return fmt.Errorf("%s, a leaf, imports %s", dir, imp)
	case to.kind == leaf, under(imp, dir):
		return nil
	case to.level >= from.level:
		return fmt.Errorf("%s (layer %d, %s) imports %s (layer %d, %s): imports go only downward", dir, from.level, from.root, imp, to.level, to.root)
	}
	return nil
}

// modulePath reads the module's path from root/go.mod.
func modulePath(root string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return f[1], nil
		}
	}
	return "", errors.New("go.mod names no module")
}

// scan returns every import of a package of the module under root that
// breaks the rule, sorted.
func scan(root string) ([]string, error) {
	mod, err := modulePath(root)
	if err != nil {
		return nil, err
	}
	var bad []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		name := d.Name()
		if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "bin" || name == "vendor") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(p, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		dir, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		dir = filepath.ToSlash(dir)
		for _, imp := range pkg.Imports {
			if rel, ok := strings.CutPrefix(imp, mod+"/"); ok {
				if err := check(dir, rel); err != nil {
					bad = append(bad, err.Error())
				}
			}
		}
		return nil
	})
	sort.Strings(bad)
	return bad, err
}

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	bad, err := scan(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "layers:", err)
		os.Exit(2)
	}
	for _, b := range bad {
		fmt.Println(b)
	}
	if len(bad) > 0 {
		fmt.Fprintf(os.Stderr, "layers: %d imports against the layering (docs/ARCHITECTURE.md)\n", len(bad))
		os.Exit(1)
	}
}
