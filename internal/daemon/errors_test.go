package daemon

import (
	"fmt"
	"testing"

	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/fusefs"
)

// TestClassifyDamaged: damaged store files and a session's damaged
// journal are both "damaged" (exit 8), however deeply wrapped.
func TestClassifyDamaged(t *testing.T) {
	for name, err := range map[string]error{
		"store":   fmt.Errorf("open store: %w", badgerstore.ErrDamaged),
		"journal": fmt.Errorf("mount: session s: %w", &fusefs.JournalDamageError{Path: "j", Offset: 40, Records: 2}),
	} {
		if got := classify(err); got != CodeDamaged {
			t.Errorf("%s: %q, want %q", name, got, CodeDamaged)
		}
	}
}
