// Command funclen reports every function of the module's Go files, tests
// included, that is longer than a limit, and exits 1 if there is one.
// `make lint` runs it with gocyclo, which bounds the other measure of a
// function a reader has to hold in mind at once.
//
// Usage: go run ./internal/lint/funclen [-max 99] [dir]
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	limit := flag.Int("max", 99, "the most lines a function may have, from its func line to its closing brace")
	flag.Parse()
	root := "."
	if flag.NArg() > 0 {
		root = flag.Arg(0)
	}
	long, err := scan(root, *limit)
	if err != nil {
		fmt.Fprintln(os.Stderr, "funclen:", err)
		os.Exit(2)
	}
	for _, l := range long {
		fmt.Println(l)
	}
	if len(long) > 0 {
		fmt.Fprintf(os.Stderr, "funclen: %d functions over %d lines\n", len(long), *limit)
		os.Exit(1)
	}
}

// scan returns "path:line: name is N lines" for every function under root
// longer than limit lines, tests included, skipping hidden, bin and
// testdata directories.
func scan(root string, limit int) ([]string, error) {
	var long []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > limit {
				long = append(long, fmt.Sprintf("%s:%d: %s is %d lines", p, start.Line, fd.Name.Name, n))
			}
		}
		return nil
	})
	return long, err
}
