package manifest

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
)

func TestSnapshotRoundTrip(t *testing.T) {
	for _, s := range []*Snapshot{
		fixtureSnapshot(),
		{Version: FormatVersion, Session: "s", Root: fakeRef("r")},
	} {
		b, err := EncodeSnapshot(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeSnapshot(b)
		if err != nil {
			t.Fatal(err)
		}
		again, _ := EncodeSnapshot(got)
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%s\n%s", b, again)
		}
		if SnapshotID(b) != cas.Sum(b).Hex() || len(SnapshotID(b)) != 64 {
			t.Fatal("SnapshotID")
		}
	}
}

func TestSnapshotValidate(t *testing.T) {
	mod := func(f func(s *Snapshot)) *Snapshot {
		s := fixtureSnapshot()
		f(s)
		return s
	}
	for _, tc := range []struct {
		what string
		s    *Snapshot
		want error
	}{
		{"fixture", fixtureSnapshot(), nil},
		{"no parent, origin, handles", mod(func(s *Snapshot) { s.Parent, s.Origin, s.Handles = "", nil, nil }), nil},
		{"origin session only", mod(func(s *Snapshot) { s.Origin.Snapshot = "" }), nil},
		{"message at limit", mod(func(s *Snapshot) { s.Message = strings.Repeat("m", MaxMessageLen) }), nil},
		{"version 0", mod(func(s *Snapshot) { s.Version = 0 }), ErrUnsupportedVersion},
		{"version 3", mod(func(s *Snapshot) { s.Version = 3 }), ErrUnsupportedVersion},
		{"version 2 without a layout", mod(func(s *Snapshot) { s.Version = 2 }), ErrInvalid},
		{"bad session", mod(func(s *Snapshot) { s.Session = "-x" }), ErrInvalidName},
		{"empty session", mod(func(s *Snapshot) { s.Session = "" }), ErrInvalidName},
		{"bad parent", mod(func(s *Snapshot) { s.Parent = "abc" }), ErrInvalid},
		{"parent with prefix", mod(func(s *Snapshot) { s.Parent = fakeRef("p").String() }), ErrInvalid},
		{"upper-case parent", mod(func(s *Snapshot) { s.Parent = strings.ToUpper(fakeRef("p").Hex()) }), ErrInvalid},
		{"bad origin session", mod(func(s *Snapshot) { s.Origin.Session = "a b" }), ErrInvalidName},
		{"bad origin snapshot", mod(func(s *Snapshot) { s.Origin.Snapshot = "zz" }), ErrInvalid},
		{"zero root", mod(func(s *Snapshot) { s.Root = cas.Ref{} }), ErrInvalid},
		{"message too long", mod(func(s *Snapshot) { s.Message = strings.Repeat("m", MaxMessageLen+1) }), ErrTooLarge},
		{"message not UTF-8", mod(func(s *Snapshot) { s.Message = "\xff" }), ErrInvalid},
		{"empty provider", mod(func(s *Snapshot) { s.Handles[""] = Handle{ID: "x"} }), ErrInvalid},
		{"empty handle id", mod(func(s *Snapshot) { s.Handles["codex"] = Handle{Through: "t"} }), ErrInvalid},
		{"handle id too long", mod(func(s *Snapshot) { s.Handles["codex"] = Handle{ID: strings.Repeat("i", MaxHandleLen+1)} }), ErrTooLarge},
		{"through not UTF-8", mod(func(s *Snapshot) { s.Handles["codex"] = Handle{ID: "i", Through: "\xc0"} }), ErrInvalid},
	} {
		err := tc.s.Validate()
		if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, err, tc.want)
		}
		if _, encErr := EncodeSnapshot(tc.s); (encErr == nil) != (err == nil) {
			t.Errorf("%s: EncodeSnapshot disagrees with Validate: %v", tc.what, encErr)
		}
	}
}

func TestDecodeSnapshotRejects(t *testing.T) {
	good, err := EncodeSnapshot(&Snapshot{Version: FormatVersion, Session: "s", Root: fakeRef("r")})
	if err != nil {
		t.Fatal(err)
	}
	g := string(good)
	root := fakeRef("r").String()
	for _, tc := range []struct {
		what string
		b    string
		want error
	}{
		{"empty", "", ErrMalformed},
		{"not JSON", "hello", ErrMalformed},
		{"array", "[]", ErrMalformed},
		{"no version", `{"session":"s","created_ns":0,"root":"` + root + `"}`, ErrUnsupportedVersion},
		{"future version", strings.Replace(g, `"version":1`, `"version":3`, 1), ErrUnsupportedVersion},
		{"unknown field", strings.Replace(g, `{`, `{"extra":1,`, 1), ErrMalformed},
		{"spaces", strings.Replace(g, `,`, `, `, 1), ErrMalformed},
		{"trailing newline", g + "\n", ErrMalformed},
		{"trailing value", g + "{}", ErrMalformed},
		{"field order", `{"session":"s","version":1,"created_ns":0,"root":"` + root + `"}`, ErrMalformed},
		{"duplicate field", strings.Replace(g, `"session":"s"`, `"session":"t","session":"s"`, 1), ErrMalformed},
		{"case-folded field", strings.Replace(g, `"session"`, `"Session"`, 1), ErrMalformed},
		{"empty optional present", strings.Replace(g, `"created_ns"`, `"parent":"","created_ns"`, 1), ErrMalformed},
		{"escaped name", strings.Replace(g, `"s"`, `"\u0073"`, 1), ErrMalformed},
		{"bad root", strings.Replace(g, root, "sha256:00", 1), ErrMalformed},
		{"invalid content", strings.Replace(g, `"s"`, `"-s"`, 1), ErrInvalidName},
		{"too large", `{"version":1,"message":"` + strings.Repeat("x", MaxSnapshotSize) + `"}`, ErrTooLarge},
	} {
		if _, err := DecodeSnapshot([]byte(tc.b)); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.what, err, tc.want)
		}
	}
	if _, err := DecodeSnapshot(good); err != nil {
		t.Fatal(err)
	}
}
