package remote

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/homefs/homefs/cas"
)

// With no remote configured, a damaged local chunk is reported as damaged
// and nothing claims a fetch from a remote; a missing one says that no
// remote is configured.
func TestReadThroughNoRemote(t *testing.T) {
	ctx := context.Background()
	local := cas.NewMemory()
	ref, err := local.Put(ctx, []byte("chunk"))
	if err != nil {
		t.Fatal(err)
	}
	if err := local.CorruptForTest(ref); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	rt := NewReadThrough(local, ReadThroughOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	defer rt.Close()
	if _, err := rt.Get(ctx, ref); !errors.Is(err, cas.ErrCorrupt) {
		t.Fatalf("Get of a damaged chunk: %v, want ErrCorrupt", err)
	}
	if bytes.Contains(logs.Bytes(), []byte("remote")) {
		t.Errorf("log mentions a remote with none configured:\n%s", logs.String())
	}
	if _, err := rt.Get(ctx, cas.Sum([]byte("absent"))); !errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("Get of an absent chunk: %v, want ErrNotFound", err)
	}
}
