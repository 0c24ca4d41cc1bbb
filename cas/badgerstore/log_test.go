package badgerstore

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestBadgerLogQuiet: Badger's cache advice, which repeats every minute,
// is Debug; its other warnings stay warnings.
func TestBadgerLogQuiet(t *testing.T) {
	var buf bytes.Buffer
	a := slogAdapter{slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	a.Warningf("%s might be too small. Metrics: %s\n", "Block cache", "hit: 1 miss: 9")
	a.Warningf("Cache life expectancy (in seconds): %+v\n", "x")
	if buf.Len() != 0 {
		t.Fatalf("cache advice logged at Info and above: %s", buf.String())
	}
	a.Warningf("while truncating: %v", "err")
	if !strings.Contains(buf.String(), "level=WARN") {
		t.Fatalf("a real warning was not logged: %q", buf.String())
	}
}
