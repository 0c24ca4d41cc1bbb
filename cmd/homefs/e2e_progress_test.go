package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"
	"github.com/stretchr/testify/require"
)

// runTTY runs a homefs command with stderr on a pseudo-terminal and
// returns its exit code, stdout and what the terminal showed.
func (e *env) runTTY(args ...string) (int, string, string) {
	e.t.Helper()
	ptmx, tty, err := pty.Open()
	require.NoError(e.t, err)
	defer ptmx.Close()
	require.NoError(e.t, pty.Setsize(ptmx, &pty.Winsize{Rows: 24, Cols: 100}))
	cmd := exec.Command(homefsBin, args...)
	cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+e.root, "GORACE=atexit_sleep_ms=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, tty
	require.NoError(e.t, cmd.Start())
	tty.Close() // the child's copy keeps it open; EIO on ptmx once it exits
	shown := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(ptmx)
		shown <- string(b)
	}()
	err = cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(e.t, err)
	}
	return code, out.String(), <-shown
}

// TestProgressOnTerminal: export and import draw a bar on a terminal's
// stderr (import of a tar file, whose size is known, up to 100%), and
// without a terminal stderr stays empty.
func TestProgressOnTerminal(t *testing.T) {
	e, src := startMounted(t, "src")
	writeFile(t, filepath.Join(src, "big.txt"), strings.Repeat("0123456789abcdef", 1<<18))
	writeFile(t, filepath.Join(src, "small.txt"), "small\n")
	snap := strings.TrimSpace(e.ok("capture", "s"))

	code, stdout, shown := e.runTTY("export", snap, filepath.Join(e.dir, "tty"))
	require.Equal(t, 0, code, "stdout %q, terminal %q", stdout, shown)
	require.Empty(t, stdout)
	require.Contains(t, shown, "export")
	require.Contains(t, shown, "\r", "no bar drawn: %q", shown)
	require.Equal(t, "small\n", readFile(t, filepath.Join(e.dir, "tty", "small.txt")))

	r := e.run("export", snap, filepath.Join(e.dir, "plain"))
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr, "progress without a terminal")
	require.Empty(t, r.stdout)

	tarFile := filepath.Join(e.dir, "s.tar")
	r = e.run("export", snap, "-")
	require.Equal(t, 0, r.code, r.stderr)
	require.Empty(t, r.stderr, "progress without a terminal")
	require.NoError(t, os.WriteFile(tarFile, []byte(r.stdout), 0o644))

	code, stdout, shown = e.runTTY("import", tarFile, "from-tar")
	require.Equal(t, 0, code, "stdout %q, terminal %q", stdout, shown)
	require.Contains(t, stdout, "imported from-tar")
	require.Contains(t, shown, "import")
	require.Contains(t, shown, "100%", "terminal %q", shown)

	code, stdout, shown = e.runTTY("fsck", "--json")
	require.Equal(t, 0, code, "stdout %q, terminal %q", stdout, shown)
	require.Empty(t, shown, "progress with --json")
}
