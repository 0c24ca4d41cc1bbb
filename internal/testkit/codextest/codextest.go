// Package codextest runs the real OpenAI Codex CLI offline in tests: it
// points Codex at a mock of the Responses API (internal/mockresponses) and
// runs `codex exec` with CODEX_HOME and the workspace wherever the test
// wants them, typically on homefs mounts.
package codextest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Version is the Codex CLI release whose behaviour (its rollout format,
// its flags) the provider tests are written against; .ci/install
// installs it.
const Version = "0.169.0"

// Require skips a test that needs the real Codex CLI and FUSE mounts when
// they are missing, except in CI (CI=true), where .ci/run installs Codex
// and the test must run: there it fails instead.
func Require(t testing.TB) {
	t.Helper()
	missing := ""
	if _, err := exec.LookPath("codex"); err != nil {
		missing = "codex CLI not installed (npm install -g @openai/codex@" + Version + ")"
	} else if _, err := os.Stat("/dev/fuse"); err != nil {
		missing = "no /dev/fuse"
	} else if os.Getuid() != 0 {
		missing = "FUSE mounts need root"
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: CI must run the real Codex test", missing)
	}
	t.Skip(missing)
}

// Config is a config.toml pointing Codex at the mock Responses API at url,
// with no retries so a failing turn fails at once.
func Config(url string) string {
	return fmt.Sprintf(`model = "mock-model"
model_provider = "mock"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.mock]
name = "mock"
base_url = %q
wire_api = "responses"
env_key = "MOCK_API_KEY"
request_max_retries = 0
stream_max_retries = 0
`, url)
}

var sessionID = regexp.MustCompile(`(?m)^session id: ([0-9a-f-]{36})$`)

// SessionID returns the session id `codex exec` reports in its output.
func SessionID(out []byte) (string, bool) {
	m := sessionID.FindSubmatch(out)
	if m == nil {
		return "", false
	}
	return string(m[1]), true
}

// Exec runs `codex exec --skip-git-repo-check ARGS…` with CODEX_HOME at
// home and the working directory at workspace, and returns the session id
// Codex reports.
func Exec(t testing.TB, home, workspace string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "codex", append([]string{"exec", "--skip-git-repo-check"}, args...)...)
	cmd.Dir = workspace
	cmd.Env = append(os.Environ(),
		"CODEX_HOME="+home,
		"HOME="+t.TempDir(),
		"MOCK_API_KEY=test",
		"NO_COLOR=1",
	)
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("codex %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	m := sessionID.FindSubmatch(out)
	if m == nil {
		t.Fatalf("codex %s: no session id in\n%s", strings.Join(args, " "), out)
	}
	return string(m[1])
}

// HashTree returns path → SHA-256 of every regular file below dir.
func HashTree(t testing.TB, dir string) map[string][32]byte {
	t.Helper()
	sums := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sums[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}
