package remote

import (
	"errors"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/remote/s3test"
)

// TestReadThroughLocalOnly: under cas.LocalOnly a ReadThrough serves what
// the local store holds and answers cas.ErrNotLocal for the rest at once,
// without a request to the remote (here one that never answers, which a
// fetch would wait for until its retries ran out).
func TestReadThroughLocalOnly(t *testing.T) {
	ctx := hangGuard(t)
	r := openAt(t, s3test.Silent(t), "silent", quick)
	local := cas.NewMemory()
	ref, err := local.Put(ctx, []byte("local chunk"))
	if err != nil {
		t.Fatal(err)
	}
	rt := NewReadThrough(local, ReadThroughOptions{ReadAhead: -1, Logger: testLogger()}, r)
	defer rt.Close()

	got, err := rt.Get(cas.LocalOnly(ctx), ref)
	if err != nil || string(got) != "local chunk" {
		t.Fatalf("local-only Get of a local chunk: %q, %v", got, err)
	}
	_, err = rt.Get(cas.LocalOnly(ctx), cas.Sum([]byte("not local")))
	if !errors.Is(err, cas.ErrNotLocal) {
		t.Fatalf("local-only Get of a chunk only a remote could have: %v, want ErrNotLocal", err)
	}
	if st := r.Stats(); st.Gets+st.Heads != 0 {
		t.Fatalf("a local-only Get asked the remote: %+v", st)
	}
}
