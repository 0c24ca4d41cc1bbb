package needfuse

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSkipFailsUnderCI: outside CI a missing prerequisite skips the test;
// with CI set it fails it. Each case runs in a child process, since a
// failing subtest would fail this one.
func TestSkipFailsUnderCI(t *testing.T) {
	if os.Getenv("NEEDFUSE_CHILD") != "" {
		Skip(t, "prerequisite missing")
		return
	}
	for _, tc := range []struct {
		ci       string
		wantFail bool
	}{{"", false}, {"true", true}, {"1", true}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSkipFailsUnderCI$", "-test.v")
		cmd.Env = append(os.Environ(), "NEEDFUSE_CHILD=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		failed := err != nil
		if failed != tc.wantFail {
			t.Errorf("CI=%q: failed=%v, want %v:\n%s", tc.ci, failed, tc.wantFail, out)
		}
		if !tc.wantFail && !strings.Contains(string(out), "--- SKIP") {
			t.Errorf("CI=%q: not skipped:\n%s", tc.ci, out)
		}
	}
}
