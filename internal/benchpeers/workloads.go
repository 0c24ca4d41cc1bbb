package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// gitEnv keeps the user's and the system's git configuration out of the
// measurement, and git's automatic gc: after a commit of 12k files it
// packs in the background, into the .git that rm -rf is removing.
var gitEnv = []string{
	"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=gc.auto", "GIT_CONFIG_VALUE_0=0",
	"GIT_CONFIG_KEY_1=maintenance.auto", "GIT_CONFIG_VALUE_1=false",
	"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@localhost",
	"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@localhost",
}

// A step is one row of the table: an untimed preparation, then the timed
// part, run in the target's directory.
type step struct {
	key   string
	label string
	prep  func(ctx context.Context, dir string) error
	timed func(ctx context.Context, dir string) error
}

// steps are the workloads in the order they run (each leaves what the
// next one needs: the tree, then the 1 GiB file).
func (r *rig) steps(t target) []step {
	tree := func(dir string) string { return filepath.Join(dir, "tree") }
	big := func(dir string) string { return filepath.Join(dir, "big") }
	sh := func(args ...string) func(context.Context, string) error {
		return func(ctx context.Context, dir string) error { return run(ctx, tree(dir), gitEnv, args[0], args[1:]...) }
	}
	return []step{
		{"untar", "untar of Go's " + r.in.treeName + " (" + r.in.treeEntries + " entries)",
			func(_ context.Context, dir string) error { return os.Mkdir(tree(dir), 0o755) },
			func(ctx context.Context, dir string) error {
				return run(ctx, tree(dir), nil, "tar", "-xf", r.in.tar)
			}},
		{"git-add", "git init + git add -A", nil, func(ctx context.Context, dir string) error {
			if err := sh("git", "init", "-q")(ctx, dir); err != nil {
				return err
			}
			return sh("git", "add", "-A")(ctx, dir)
		}},
		{"git-commit", "git commit", nil, sh("git", "commit", "-q", "-m", "bench")},
		{"git-status", "git status", nil, sh("git", "status")},
		{"grep", "grep -r over the tree (not .git)", nil,
			sh("grep", "-r", "-l", "--exclude-dir=.git", "func main", ".")},
		{"rm", "rm -rf of the tree", nil, func(ctx context.Context, dir string) error {
			return run(ctx, dir, nil, "rm", "-rf", tree(dir))
		}},
		{"jsonl", fmt.Sprintf("%s JSONL appends, O_RDWR|O_APPEND, fsync every 32 (Codex)", count(len(r.in.lines))), nil,
			func(_ context.Context, dir string) error {
				return appendLines(filepath.Join(dir, "rollout.jsonl"), r.in.lines)
			}},
		{"dd", "dd " + r.sc.bigName + " + fsync",
			func(ctx context.Context, _ string) error { return run(ctx, "", nil, "cat", r.in.big) },
			func(ctx context.Context, dir string) error {
				return run(ctx, "", nil, "dd", "if="+r.in.big, "of="+big(dir), "bs=1M", "conv=fsync", "status=none")
			}},
		{"cat", "cat of that file just written", nil, func(ctx context.Context, dir string) error {
			return run(ctx, "", nil, "cat", big(dir))
		}},
		{"cat-cold", "cat of it after a remount (cold: drop_caches)",
			func(ctx context.Context, _ string) error {
				return errors.Join(t.remount(ctx), dropCaches(ctx))
			},
			func(ctx context.Context, dir string) error { return run(ctx, "", nil, "cat", big(dir)) }},
	}
}

// count writes n as the table does: 20k, 2k, 500.
func count(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

// appendLines appends lines as Codex writes its rollout: one O_RDWR|
// O_APPEND descriptor, one write a line, fsync every 32 lines.
func appendLines(path string, lines [][]byte) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	for i, l := range lines {
		if _, err := f.Write(l); err != nil {
			return errors.Join(fmt.Errorf("jsonl: %w", err), f.Close())
		}
		if (i+1)%32 == 0 {
			if err := f.Sync(); err != nil {
				return errors.Join(fmt.Errorf("jsonl: %w", err), f.Close())
			}
		}
	}
	if err := f.Sync(); err != nil {
		return errors.Join(fmt.Errorf("jsonl: %w", err), f.Close())
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	return nil
}

// suite runs every step once on t and records the timed parts, then
// removes what the steps left.
func (r *rig) suite(ctx context.Context, t target, round int) error {
	dir := t.dir()
	for _, s := range r.steps(t) {
		if s.prep != nil {
			if err := s.prep(ctx, dir); err != nil {
				return fmt.Errorf("%s: %s: prepare: %w", t.name(), s.key, err)
			}
		}
		start := time.Now()
		if err := s.timed(ctx, dir); err != nil {
			return fmt.Errorf("%s: %s: %w", t.name(), s.key, err)
		}
		d := time.Since(start)
		r.res.add(t.name(), s.key, round, d)
		fmt.Fprintf(os.Stderr, "  %-18s %-11s %8.3f s\n", t.name(), s.key, d.Seconds())
	}
	for _, f := range []string{"big", "rollout.jsonl"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			return fmt.Errorf("%s: %w", t.name(), err)
		}
	}
	return run(ctx, "", nil, "sync")
}
