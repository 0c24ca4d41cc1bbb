package fusefs

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func needTool(t *testing.T, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		// .ci/run installs every tool these tests use: in CI a missing
		// one is a failure, not a reason to skip.
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s not installed", name)
		}
		t.Skipf("%s not installed", name)
	}
	return p
}

func TestGit(t *testing.T) {
	t.Parallel()
	needTool(t, "git")
	e, m := newMount(t)
	repo := filepath.Join(m.Dir(), "workspace/repo")
	require.NoError(t, os.MkdirAll(repo, 0o755))
	home := t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_DATE=2020-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2020-01-01T00:00:00Z")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "git %v: %s", args, out)
		return strings.TrimSpace(string(out))
	}
	git(repo, "config", "--global", "user.name", "Test")
	git(repo, "config", "--global", "user.email", "test@example.com")
	// No detached background gc or maintenance outliving the test in the mount.
	git(repo, "config", "--global", "gc.auto", "0")
	git(repo, "config", "--global", "maintenance.auto", "false")
	git(repo, "init", "-q", "-b", "main")
	write(t, filepath.Join(repo, "README"), "hello\n")
	write(t, filepath.Join(repo, "src/main.go"), "package main\n")
	require.NoError(t, os.WriteFile(filepath.Join(repo, "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	git(repo, "add", ".")
	git(repo, "commit", "-q", "-m", "first")
	git(repo, "branch", "feature")
	git(repo, "checkout", "-q", "feature")
	write(t, filepath.Join(repo, "src/main.go"), "package main\n\nfunc main() {}\n")
	require.NoError(t, os.Remove(filepath.Join(repo, "README")))
	git(repo, "add", "-A")
	git(repo, "commit", "-q", "-m", "feature")
	require.Equal(t, "", git(repo, "status", "--porcelain"))
	git(repo, "checkout", "-q", "main")
	require.Equal(t, "hello\n", read(t, filepath.Join(repo, "README")))
	require.Equal(t, "package main\n", read(t, filepath.Join(repo, "src/main.go")))
	require.Equal(t, "", git(repo, "status", "--porcelain"))
	write(t, filepath.Join(repo, "untracked"), "u")
	require.Equal(t, "?? untracked", git(repo, "status", "--porcelain"))
	head := git(repo, "rev-parse", "feature")

	// A fork holds a working repository.
	fm := forkMount(t, e, "s", "git-fork")
	frepo := filepath.Join(fm.Dir(), "workspace/repo")
	require.Equal(t, head, git(frepo, "rev-parse", "feature"))
	git(frepo, "fsck", "--strict")
	require.Equal(t, "?? untracked", git(frepo, "status", "--porcelain"))
	git(frepo, "checkout", "-q", "feature")
	_, err := os.Stat(filepath.Join(frepo, "README"))
	require.True(t, os.IsNotExist(err))
	require.Equal(t, "hello\n", read(t, filepath.Join(repo, "README")), "the source is untouched")
}

// sqlite runs one sqlite3 process with the script on stdin.
func sqlite(ctx context.Context, db, script string) (string, error) {
	cmd := exec.CommandContext(ctx, "sqlite3", "-batch", db)
	cmd.Stdin = strings.NewReader(".timeout 20000\n" + script)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("sqlite3: %w: %s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

func TestSQLiteWAL(t *testing.T) {
	t.Parallel()
	needTool(t, "sqlite3")
	e, m := newMount(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	db := filepath.Join(m.Dir(), "state_5.sqlite")
	out, err := sqlite(ctx, db, "PRAGMA journal_mode=WAL;\nCREATE TABLE t(writer INTEGER, seq INTEGER, pad TEXT, PRIMARY KEY(writer, seq));\n")
	require.NoError(t, err)
	require.Equal(t, "wal", out)

	const rows = 300
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := 1; w <= 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s strings.Builder
			for i := 1; i <= rows; i++ {
				// Each row in its own transaction; the second statement
				// of each checks the per-writer sequence has no gaps.
				fmt.Fprintf(&s, "BEGIN IMMEDIATE; INSERT INTO t VALUES(%d, %d, hex(randomblob(200))); COMMIT;\n", w, i)
			}
			if _, err := sqlite(ctx, db, s.String()); err != nil {
				errs <- fmt.Errorf("writer %d: %w", w, err)
			}
		}()
	}
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			out, err := sqlite(ctx, db, "SELECT count(*) = coalesce(sum(mx), 0) FROM (SELECT writer, max(seq) AS mx, count(*) AS n FROM t GROUP BY writer) WHERE n = mx;\nSELECT count(*) FROM t;\n")
			if err != nil {
				errs <- fmt.Errorf("reader: %w", err)
				return
			}
			_ = out
		}
	}()

	// Capture and fork while the writers run.
	time.Sleep(300 * time.Millisecond)
	_, id, err := e.Capture(ctx, "s", "mid-write", nil)
	require.NoError(t, err)
	_, err = e.Fork(ctx, "s", "sqlite-fork")
	require.NoError(t, err)

	// Wait for the writers, then stop the reader.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			out, err := sqlite(ctx, db, "SELECT count(*) FROM t;\n")
			if err != nil || out == strconv.Itoa(2*rows) || ctx.Err() != nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	<-done
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	check := func(db string) {
		t.Helper()
		out, err := sqlite(ctx, db, "PRAGMA integrity_check;\nSELECT writer, count(*), coalesce(max(seq), 0) FROM t GROUP BY writer;\n")
		require.NoError(t, err)
		lines := strings.Split(out, "\n")
		require.Equal(t, "ok", lines[0], "integrity_check of %s", db)
		for _, l := range lines[1:] {
			f := strings.Split(l, "|")
			require.Len(t, f, 3)
			require.Equal(t, f[1], f[2], "writer %s: rows are a gap-free prefix", f[0])
		}
	}
	check(db)
	out, err = sqlite(ctx, db, "SELECT count(*) FROM t;\n")
	require.NoError(t, err)
	require.Equal(t, strconv.Itoa(2*rows), out)

	fm := MountForTest(t, e, "sqlite-fork", "", MountOptions{})
	check(filepath.Join(fm.Dir(), "state_5.sqlite"))
	// The captured snapshot, forked and mounted read-write as SQLite needs.
	fm2 := forkMount(t, e, id, "sqlite-snap")
	check(filepath.Join(fm2.Dir(), "state_5.sqlite"))
}

func jsonlLine(i int) []byte {
	return fmt.Appendf(nil, `{"timestamp":"2026-01-01T00:00:%02dZ","ordinal":%d,"type":"response_item","payload":{"text":%q}}`+"\n",
		i%60, i, strings.Repeat("abcdefghij", 1+i%37))
}

func jsonlAll(n int) []byte {
	var b []byte
	for i := range n {
		b = append(b, jsonlLine(i)...)
	}
	return b
}

// helperJSONLReader: PATH LINES reopens the file like Codex's readers do
// (stat, seek to the last offset, read the new bytes) until it has seen
// LINES lines; the bytes must be a prefix of the expected file. It prints
// the number of reads.
//
// A stat may report bytes the reader cannot read yet: while another
// process's append is in flight the kernel ignores the size in a GETATTR
// reply for the inode (FUSE_I_SIZE_UNSTABLE) yet returns it to the stat
// caller, and reads stop at the old size until the write returns. The
// bytes must become readable within that write's time, never wrong.
func helperJSONLReader(args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("jsonl-reader PATH LINES")
	}
	n, _ := strconv.Atoi(args[1])
	want := jsonlAll(n)
	var have []byte
	deadline := time.Now().Add(60 * time.Second)
	reads := 0
	for len(have) < len(want) {
		if time.Now().After(deadline) {
			return fmt.Errorf("timeout with %d of %d bytes", len(have), len(want))
		}
		f, err := os.Open(args[0])
		if err != nil {
			if os.IsNotExist(err) {
				continue
			}
			return err
		}
		st, err := f.Stat()
		if err != nil {
			return err
		}
		size := st.Size()
		if size < int64(len(have)) {
			return fmt.Errorf("size went back from %d to %d", len(have), size)
		}
		for wait := time.Now().Add(2 * time.Second); int64(len(have)) < size; {
			buf := make([]byte, size-int64(len(have)))
			k, err := f.ReadAt(buf, int64(len(have)))
			if err != nil && err != io.EOF {
				return err
			}
			have = append(have, buf[:k]...)
			if !isPrefix(have, want) {
				return fmt.Errorf("content at %d is not what was appended", len(have))
			}
			if int64(len(have)) < size && time.Now().After(wait) {
				return fmt.Errorf("stat said %d bytes, only %d readable after 2s", size, len(have))
			}
		}
		f.Close()
		reads++
	}
	fmt.Println(reads)
	return nil
}

func TestJSONLAppend(t *testing.T) {
	t.Parallel()
	e, m := newMount(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const lines = 2000
	p := filepath.Join(m.Dir(), "sessions/2026/01/01/rollout.jsonl")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	reader := helper(ctx, "jsonl-reader", p, strconv.Itoa(lines))
	var readerOut bytes.Buffer
	reader.Stdout = &readerOut
	require.NoError(t, reader.Start())

	f, err := os.OpenFile(p, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	tail, err := os.Open(p) // an in-process reader with its own descriptor
	require.NoError(t, err)
	defer tail.Close()
	var id string
	total := 0
	for i := range lines {
		l := jsonlLine(i)
		k, err := f.Write(l)
		require.NoError(t, err)
		require.Equal(t, len(l), k)
		total += k
		if i%50 == 0 {
			st, err := os.Stat(p)
			require.NoError(t, err)
			require.Equal(t, int64(total), st.Size(), "size visible at once")
			got := make([]byte, len(l))
			_, err = tail.ReadAt(got, int64(total-len(l)))
			require.NoError(t, err)
			require.Equal(t, l, got, "content visible at once")
		}
		if i == lines/2 {
			_, id, err = e.Capture(ctx, "s", "mid-append", nil)
			require.NoError(t, err)
			_, err = e.Fork(ctx, "s", "jsonl-fork")
			require.NoError(t, err)
		}
	}
	require.NoError(t, reader.Wait(), "reader process")
	require.NotEmpty(t, strings.TrimSpace(readerOut.String()))
	final, err := os.ReadFile(p)
	require.NoError(t, err)
	require.True(t, bytes.Equal(jsonlAll(lines), final))

	snap := mountSnapshot(t, e, id)
	got, err := os.ReadFile(filepath.Join(snap, "sessions/2026/01/01/rollout.jsonl"))
	require.NoError(t, err)
	require.True(t, isPrefix(got, final), "the snapshot is a byte prefix of the final file")
	require.GreaterOrEqual(t, len(got), len(jsonlAll(lines/2+1)), "the snapshot holds every line written before it")
	fm := MountForTest(t, e, "jsonl-fork", "", MountOptions{})
	got, err = os.ReadFile(filepath.Join(fm.Dir(), "sessions/2026/01/01/rollout.jsonl"))
	require.NoError(t, err)
	require.True(t, isPrefix(got, final), "the fork is a byte prefix of the final file")
}
