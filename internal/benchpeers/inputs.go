package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// inputs are the workloads' inputs, made once a run.
type inputs struct {
	tar         string // Go's source tree, packed
	treeName    string
	treeEntries string
	big         string // bigBytes of random bytes, the dd source
	lines       [][]byte
}

func makeInputs(ctx context.Context, work string, sc scale) (*inputs, error) {
	in := &inputs{tar: filepath.Join(work, "src.tar"), big: filepath.Join(work, "big.src"), treeName: sc.tree + "/"}
	goroot, err := output(ctx, "", nil, "go", "env", "GOROOT")
	if err != nil {
		return nil, err
	}
	if err := run(ctx, "", nil, "tar", "-cf", in.tar, "-C", strings.TrimSpace(goroot), sc.tree); err != nil {
		return nil, err
	}
	list, err := output(ctx, "", nil, "tar", "-tf", in.tar)
	if err != nil {
		return nil, err
	}
	n := strings.Count(list, "\n")
	in.treeEntries = fmt.Sprintf("%d", n)
	if n >= 1000 {
		in.treeEntries = fmt.Sprintf("%.1fk", float64(n)/1000)
	}
	if err := randomFile(in.big, sc.bigBytes); err != nil {
		return nil, err
	}
	in.lines = jsonLines(sc.lines)
	return in, nil
}

// randomFile writes size bytes from a fixed seed: no two blocks alike, so
// that no target can deduplicate or compress them.
func randomFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("dd source: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	rng := rand.NewChaCha8([32]byte{'h', 'o', 'm', 'e', 'f', 's'})
	buf := make([]byte, 1<<20)
	for left := size; left > 0; left -= int64(len(buf)) {
		_, _ = rng.Read(buf)
		if _, err := w.Write(buf[:min(left, int64(len(buf)))]); err != nil {
			return errors.Join(fmt.Errorf("dd source: %w", err), f.Close())
		}
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return fmt.Errorf("dd source: %w", err)
	}
	return nil
}

// jsonLines makes n JSON lines of 200–1000 bytes from a fixed seed, as an
// agent's rollout has them.
func jsonLines(n int) [][]byte {
	rng := rand.New(rand.NewPCG(1, 2))
	const letters = "abcdefghijklmnopqrstuvwxyz "
	lines := make([][]byte, n)
	for i := range lines {
		text := make([]byte, 170+rng.IntN(781))
		for j := range text {
			text[j] = letters[rng.IntN(len(letters))]
		}
		lines[i] = fmt.Appendf(nil, `{"type":"event_msg","seq":%d,"text":"%s"}`+"\n", i, text)
	}
	return lines
}
