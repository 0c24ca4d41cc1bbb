package cas_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
)

func TestParseRefErrors(t *testing.T) {
	valid := cas.Sum([]byte("x")).String()
	tests := []struct {
		name, in, wantErr string
	}{
		{"empty", "", "want prefix"},
		{"no prefix", valid[len("sha256:"):], "want prefix"},
		{"other hash", "sha512:" + valid[7:], "want prefix"},
		{"upper prefix", "SHA256:" + valid[7:], "want prefix"},
		{"short", valid[:len(valid)-1], "want 64 hex digits, have 63"},
		{"long", valid + "0", "want 64 hex digits, have 65"},
		{"upper hex", "sha256:" + strings.ToUpper(valid[7:]), "lower-case hex"},
		{"non hex", valid[:len(valid)-1] + "g", "lower-case hex"},
		{"space", " " + valid, "want prefix"},
		{"trailing newline", valid[:len(valid)-1] + "\n", "lower-case hex"},
		{"multibyte", valid[:len(valid)-2] + "é", "lower-case hex"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := cas.ParseRef(tt.in)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("ParseRef(%q) = %v, %v; want error containing %q", tt.in, r, err, tt.wantErr)
			}
			if !r.IsZero() {
				t.Fatalf("ParseRef(%q) returned a non-zero ref with its error", tt.in)
			}
		})
	}
}

func TestRefForms(t *testing.T) {
	r := cas.Sum([]byte("hello"))
	const want = "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	if r.String() != want || r.Hex() != want[7:] || r.Short() != want[7:19] {
		t.Fatalf("forms of Sum(hello): %s %s %s", r, r.Hex(), r.Short())
	}
	if cas.MustParseRef(want) != r {
		t.Fatal("MustParseRef round trip")
	}
	b, err := json.Marshal(map[string]cas.Ref{"r": r})
	if err != nil || string(b) != `{"r":"`+want+`"}` {
		t.Fatalf("JSON: %s, %v", b, err)
	}
	var back map[string]cas.Ref
	if err := json.Unmarshal(b, &back); err != nil || back["r"] != r {
		t.Fatalf("JSON round trip: %v, %v", back, err)
	}
	if err := json.Unmarshal([]byte(`{"r":"sha256:zz"}`), &back); err == nil {
		t.Fatal("JSON accepted a bad ref")
	}
	if !(cas.Ref{}).IsZero() || r.IsZero() {
		t.Fatal("IsZero")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("MustParseRef did not panic")
		}
	}()
	cas.MustParseRef("bad")
}

// FuzzParseRef: whatever ParseRef accepts prints back unchanged (the text
// form is canonical), and every ref survives String → ParseRef.
func FuzzParseRef(f *testing.F) {
	f.Add("sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824", []byte("hello"))
	f.Add("sha256:", []byte{})
	f.Add("SHA256:2CF24DBA5FB0A30E26E83B2AC5B9E29E1B161E5C1FA7425E73043362938B9824", []byte{0})
	f.Add("sha256:0000000000000000000000000000000000000000000000000000000000000000", []byte("x"))
	f.Fuzz(func(t *testing.T, s string, data []byte) {
		r, err := cas.ParseRef(s)
		if err == nil {
			if r.String() != s {
				t.Fatalf("ParseRef(%q).String() = %q", s, r.String())
			}
		} else if !r.IsZero() {
			t.Fatalf("ParseRef(%q) failed but returned %v", s, r)
		}
		want := cas.Sum(data)
		got, err := cas.ParseRef(want.String())
		if err != nil || got != want {
			t.Fatalf("round trip of %s: %v, %v", want, got, err)
		}
		var u cas.Ref
		if err := u.UnmarshalText([]byte(want.String())); err != nil || u != want {
			t.Fatalf("UnmarshalText round trip: %v", err)
		}
	})
}

func TestCorruptIsNotAbsent(t *testing.T) {
	// Corrupt-on-Get is also covered by the suite; here the error must
	// never be mistaken for absence.
	m := cas.NewMemory()
	ref, _ := m.Put(t.Context(), []byte("abc"))
	m.CorruptForTest(ref)
	_, err := m.Get(t.Context(), ref)
	if !errors.Is(err, cas.ErrCorrupt) || errors.Is(err, cas.ErrNotFound) {
		t.Fatalf("Get of a corrupt chunk: %v", err)
	}
}
