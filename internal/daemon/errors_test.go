package daemon

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/homefs/homefs/cas/badgerstore"
	"github.com/homefs/homefs/fusefs"
	"github.com/homefs/homefs/internal/api"
)

// TestClassifyDamaged: damaged store files and a session's damaged
// journal are both "damaged" (exit 8), however deeply wrapped.
func TestClassifyDamaged(t *testing.T) {
	for name, err := range map[string]error{
		"store":   fmt.Errorf("open store: %w", badgerstore.ErrDamaged),
		"journal": fmt.Errorf("mount: session s: %w", &fusefs.JournalDamageError{Path: "j", Offset: 40, Records: 2}),
	} {
		if got := classify(err); got != api.CodeDamaged {
			t.Errorf("%s: %q, want %q", name, got, api.CodeDamaged)
		}
	}
}

// api.GCResult is fusefs.GCResult on the wire (service.go copies it field
// by field): a field added to fusefs.GCResult needs one there too.
func TestGCResultFields(t *testing.T) {
	wire := reflect.TypeFor[api.GCResult]()
	engine := reflect.TypeFor[fusefs.GCResult]()
	for i := range engine.NumField() {
		f := engine.Field(i)
		w, ok := wire.FieldByName(f.Name)
		if !ok || w.Type != f.Type || w.Tag != f.Tag {
			t.Errorf("fusefs.GCResult.%s %v %s has no twin in api.GCResult", f.Name, f.Type, f.Tag)
		}
	}
}
