package manifest

import (
	"errors"
	"testing"
)

func TestLayoutValidate(t *testing.T) {
	home := func(sub, at, provider string) Place { return Place{Subtree: sub, At: at, Provider: provider} }
	tests := []struct {
		name string
		l    *Layout
		want error // nil: valid
	}{
		{"nil", nil, nil},
		{"home and workspace", &Layout{Homes: []Place{home("codex-home", "/home/a/.codex", "codex")}, Workspace: &Place{Subtree: "workspace", At: "/workspace"}}, nil},
		{"home without path", &Layout{Homes: []Place{home("h", "", "codex")}}, nil},
		{"root as home", &Layout{Homes: []Place{home("", "/root/.codex", "codex")}}, nil},
		{"nested canonical paths", &Layout{Homes: []Place{home("h", "/w/.codex", "codex")}, Workspace: &Place{Subtree: "w", At: "/w"}}, nil},
		{"unsorted", &Layout{Homes: []Place{home("b", "", "codex"), home("a", "", "pi")}}, ErrInvalid},
		{"no provider", &Layout{Homes: []Place{home("h", "", "")}}, ErrInvalid},
		{"bad provider", &Layout{Homes: []Place{home("h", "", "Codex")}}, ErrInvalid},
		{"provider twice", &Layout{Homes: []Place{home("a", "", "codex"), home("b", "", "codex")}}, ErrInvalid},
		{"workspace with provider", &Layout{Workspace: &Place{Subtree: "w", Provider: "pi"}}, ErrInvalid},
		{"relative path", &Layout{Workspace: &Place{Subtree: "w", At: "workspace"}}, ErrInvalid},
		{"slash", &Layout{Workspace: &Place{Subtree: "w", At: "/"}}, ErrInvalid},
		{"unclean path", &Layout{Workspace: &Place{Subtree: "w", At: "/a/../b"}}, ErrInvalid},
		{"trailing slash", &Layout{Workspace: &Place{Subtree: "w", At: "/a/"}}, ErrInvalid},
		{"control character", &Layout{Workspace: &Place{Subtree: "w", At: "/a\nb"}}, ErrInvalid},
		{"bad subtree", &Layout{Workspace: &Place{Subtree: "../w", At: "/w"}}, ErrInvalid},
		{"overlapping subtrees", &Layout{Homes: []Place{home("w/.codex", "/c", "codex")}, Workspace: &Place{Subtree: "w", At: "/w"}}, ErrInvalid},
		{"root overlaps all", &Layout{Homes: []Place{home("", "/c", "codex")}, Workspace: &Place{Subtree: "w", At: "/w"}}, ErrInvalid},
		{"system path", &Layout{Workspace: &Place{Subtree: "w", At: "/etc"}}, ErrInvalid},
		{"below a system path", &Layout{Homes: []Place{home("h", "/usr/local/bin", "codex")}}, ErrInvalid},
		{"the run directory", &Layout{Workspace: &Place{Subtree: "w", At: "/run/homefs/x"}}, ErrInvalid},
		{"a name that starts like one", &Layout{Workspace: &Place{Subtree: "w", At: "/etcetera"}}, nil},
		{"same path twice", &Layout{Homes: []Place{home("h", "/w", "codex")}, Workspace: &Place{Subtree: "w", At: "/w"}}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.l.Validate()
			if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
				t.Fatalf("Validate = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestSnapshotLayoutRoundTrip(t *testing.T) {
	s := fixtureLayoutSnapshot()
	b, err := EncodeSnapshot(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeSnapshot(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Layout.Workspace.At != "/workspace" || len(got.Layout.Homes) != 2 {
		t.Fatalf("layout %+v", got.Layout)
	}
	s.Layout = &Layout{}
	if _, err := EncodeSnapshot(s); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty layout: %v, want ErrInvalid", err)
	}
	// The version says whether a layout may be there.
	s = fixtureLayoutSnapshot()
	s.Version = FormatVersion
	if _, err := EncodeSnapshot(s); !errors.Is(err, ErrInvalid) {
		t.Fatalf("version 1 with a layout: %v, want ErrInvalid", err)
	}
	s = fixtureSnapshot()
	s.Version = SnapshotLayoutVersion
	if _, err := EncodeSnapshot(s); !errors.Is(err, ErrInvalid) {
		t.Fatalf("version 2 without a layout: %v, want ErrInvalid", err)
	}
	s.Version = 3
	if _, err := EncodeSnapshot(s); !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("version 3: %v, want ErrUnsupportedVersion", err)
	}
}
