package catalog

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

func testHead() *Head {
	return &Head{
		Session:   "alpha",
		Root:      cas.Sum([]byte("root")),
		Snapshot:  cas.Sum([]byte("snap")).Hex(),
		Origin:    &manifest.Lineage{Session: "beta", Snapshot: cas.Sum([]byte("origin")).Hex()},
		Handles:   map[string]manifest.Handle{"codex": {ID: "r-1", Through: "t-3"}, "claude": {ID: "c-9"}},
		CreatedNs: 1_700_000_000_000_000_000,
		UpdatedNs: 1_700_000_001_000_000_000,
		Gen:       7,
	}
}

func TestHeadRoundTrip(t *testing.T) {
	h := testHead()
	enc, err := EncodeHead(h)
	require.NoError(t, err)
	got, err := DecodeHead(enc)
	require.NoError(t, err)
	assert.Equal(t, h, got)

	again, err := EncodeHead(got)
	require.NoError(t, err)
	assert.Equal(t, enc, again, "encoding must be deterministic: commits compare bytes")
	assert.Contains(t, string(enc), `"version":1`)
}

func TestDecodeHeadRejects(t *testing.T) {
	good, err := EncodeHead(testHead())
	require.NoError(t, err)
	s := string(good)
	root := cas.Sum([]byte("root")).String()
	tests := []struct {
		name string
		data string
	}{
		{"empty", ""},
		{"not json", "{"},
		{"trailing", s + "{}"},
		{"version 2", strings.Replace(s, `"version":1`, `"version":2`, 1)},
		{"no version", strings.Replace(s, `"version":1,`, ``, 1)},
		{"unknown field", strings.Replace(s, `"version":1`, `"version":1,"x":1`, 1)},
		{"bad session", strings.Replace(s, `"session":"alpha"`, `"session":"a/b"`, 1)},
		{"zero root", strings.Replace(s, root, "sha256:"+strings.Repeat("0", 64), 1)},
		{"no root", strings.Replace(s, `"root":"`+root+`",`, ``, 1)},
		{"short snapshot", strings.Replace(s, `"snapshot":"`, `"snapshot":"ab`, 1)},
		{"upper-case snapshot", strings.Replace(s, `"snapshot":"`+cas.Sum([]byte("snap")).Hex(), `"snapshot":"`+strings.ToUpper(cas.Sum([]byte("snap")).Hex()), 1)},
		{"bad origin session", strings.Replace(s, `"session":"beta"`, `"session":".x"`, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NotEqual(t, s, tt.data, "the edit did not apply")
			_, err := DecodeHead([]byte(tt.data))
			assert.Error(t, err)
		})
	}
}

func TestEncodeHeadRejectsInvalid(t *testing.T) {
	h := testHead()
	h.Root = cas.Ref{}
	_, err := EncodeHead(h)
	assert.Error(t, err)
}

func FuzzDecodeHead(f *testing.F) {
	good, err := EncodeHead(testHead())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	min, err := EncodeHead(&Head{Session: "s", Root: cas.Sum(nil), Gen: 1})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(min)
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := DecodeHead(data)
		if err != nil {
			return
		}
		enc, err := EncodeHead(h)
		if err != nil {
			t.Fatalf("decoded head does not encode: %v", err)
		}
		h2, err := DecodeHead(enc)
		if err != nil {
			t.Fatalf("re-encoded head does not decode: %v", err)
		}
		enc2, err := EncodeHead(h2)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding not stable: %q vs %q (%v)", enc, enc2, err)
		}
	})
}
