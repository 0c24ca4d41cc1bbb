package remote

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/internal/remote/s3"
)

func TestParseURL(t *testing.T) {
	for _, tt := range []struct {
		in, bucket, prefix string
		ok                 bool
	}{
		{"s3://b", "b", "", true},
		{"s3://b/", "b", "", true},
		{"s3://b/p/q/", "b", "p/q", true},
		{"s3://b//p", "", "", false},
		{"s3://b/p/../q", "", "", false},
		{"http://b/p", "", "", false},
		{"s3:///p", "", "", false},
		{"s3://u:pw@b/p", "", "", false},
		{"b/p", "", "", false},
	} {
		b, p, err := ParseURL(tt.in)
		if (err == nil) != tt.ok || b != tt.bucket || p != tt.prefix {
			t.Errorf("ParseURL(%q) = %q, %q, %v", tt.in, b, p, err)
		}
	}
}

func TestRegistry(t *testing.T) {
	path := filepath.Join(t.TempDir(), RegistryFile)
	g, err := LoadRegistry(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Get(""); !errors.Is(err, ErrNoRemote) {
		t.Fatalf("Get on empty: %v", err)
	}
	c := Config{Name: "origin", URL: "s3://bucket/homefs", Endpoint: "http://127.0.0.1:7070"}
	if err := g.Add(c); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(c); !errors.Is(err, ErrRemoteExists) {
		t.Fatalf("second Add: %v", err)
	}
	if err := g.Add(Config{Name: "bad", URL: "s3://b", Endpoint: "ftp://x"}); err == nil {
		t.Fatal("Add accepted an ftp endpoint")
	}
	if got, err := g.Get(""); err != nil || got != c {
		t.Fatalf("Get(\"\") with one remote: %v %v", got, err)
	}
	if err := g.Add(Config{Name: "backup", URL: "s3://other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Get(""); !errors.Is(err, ErrNoRemote) || !strings.Contains(err.Error(), "backup, origin") {
		t.Fatalf("Get(\"\") with two remotes: %v", err)
	}
	g2, err := LoadRegistry(path)
	if err != nil {
		t.Fatal(err)
	}
	if l := g2.List(); len(l) != 2 || l[0].Name != "backup" || l[1] != c {
		t.Fatalf("reloaded: %+v", l)
	}
	b, _ := os.ReadFile(path)
	if strings.Contains(strings.ToLower(string(b)), "secret") {
		t.Fatalf("registry holds a secret: %s", b)
	}
	if err := g2.Remove("origin"); err != nil {
		t.Fatal(err)
	}
	if _, err := g2.Get("origin"); !errors.Is(err, ErrNoRemote) {
		t.Fatalf("Get after Remove: %v", err)
	}
}

// TestOpenNoCredentials: the store's ErrNoCredentials reaches Open's
// caller as remote.ErrNoCredentials (the daemon maps it for the user).
func TestOpenNoCredentials(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	c := Config{Name: "r", URL: "s3://b"}
	if _, err := Open(t.Context(), c, Options{Open: s3.Open}); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("Open without credentials: %v", err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "ENVID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "ENVSECRET")
	if _, err := Open(t.Context(), c, Options{Open: s3.Open}); err != nil {
		t.Fatalf("Open with keys in the environment: %v", err)
	}
	if _, err := Open(t.Context(), c, Options{}); err == nil {
		t.Fatal("Open without Options.Open succeeded")
	}
}

// TestServiceRemove: a removed remote leaves the registry and the
// ReadThrough's list; adding it again works.
func TestServiceRemove(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "id")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "secret")
	ctx := t.Context()
	rt := NewReadThrough(cas.NewMemory(), ReadThroughOptions{})
	defer rt.Close()
	s, err := NewService(t.TempDir(), rt, Options{Open: s3.Open})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Name: "origin", URL: "s3://b/p", Endpoint: "http://127.0.0.1:1"}
	if err := s.Add(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Remote(ctx, "origin"); err != nil {
		t.Fatal(err)
	}
	if n := len(rt.remotes); n != 1 {
		t.Fatalf("%d remotes in the ReadThrough, want 1", n)
	}
	if err := s.Remove("origin"); err != nil {
		t.Fatal(err)
	}
	if n := len(rt.remotes); n != 0 || len(s.Registry().List()) != 0 {
		t.Fatalf("after Remove: %d read-through remotes, registry %v", n, s.Registry().List())
	}
	if err := s.Remove("origin"); !errors.Is(err, ErrNoRemote) {
		t.Fatalf("second Remove: %v", err)
	}
	if err := s.Add(ctx, cfg); err != nil {
		t.Fatal(err)
	}
}

// TestReadThroughLocalDamageStaysCorrupt: a damaged local chunk that no
// remote can replace is reported as corrupt, not as missing.
func TestReadThroughLocalDamageStaysCorrupt(t *testing.T) {
	ctx := t.Context()
	local := cas.NewMemory()
	ref, err := local.Put(ctx, []byte("precious"))
	if err != nil {
		t.Fatal(err)
	}
	if err := local.CorruptForTest(ref); err != nil {
		t.Fatal(err)
	}
	rt := NewReadThrough(local, ReadThroughOptions{})
	defer rt.Close()
	if _, err := rt.Get(ctx, ref); !errors.Is(err, cas.ErrCorrupt) {
		t.Fatalf("Get of a damaged chunk without remotes: %v, want ErrCorrupt", err)
	}
}
