package remote

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
)

// fixedKey is the master key 00 01 02 … 1f.
func fixedKey() []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = byte(i)
	}
	return k
}

func testSealer(t *testing.T, key []byte) *sealer {
	t.Helper()
	s, err := newSealer(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSealOpen(t *testing.T) {
	s := testSealer(t, fixedKey())
	for _, n := range []int{0, 1, 100, cas.MaxChunkSize + 16} {
		plain := randomBytes(uint64(n), n)
		a, b := s.seal("chunks/x", plain), s.seal("chunks/x", plain)
		if len(a) != n+sealOverhead {
			t.Fatalf("%d bytes sealed into %d, want %d", n, len(a), n+sealOverhead)
		}
		if bytes.Equal(a, b) {
			t.Fatalf("two seals of %d bytes are equal: the nonce is not random", n)
		}
		if n >= 16 && bytes.Contains(a, plain[:16]) {
			t.Fatalf("sealed bytes hold the plain bytes")
		}
		got, err := s.open("chunks/x", a)
		if err != nil || !bytes.Equal(got, plain) {
			t.Fatalf("open of %d bytes: %v", n, err)
		}
	}
}

// Every change to a sealed object, its name or its key fails to open,
// with cas.ErrCorrupt: never garbage.
func TestOpenRefusesTampering(t *testing.T) {
	s := testSealer(t, fixedKey())
	plain := []byte(`{"version":1,"session":"s","snapshot":"…"}`)
	sealed := s.seal("heads/abc", plain)
	other := fixedKey()
	other[0] ^= 1
	cases := map[string]func() (string, []byte, *sealer){
		"version byte": func() (string, []byte, *sealer) { return "heads/abc", flip(sealed, 0), s },
		"nonce":        func() (string, []byte, *sealer) { return "heads/abc", flip(sealed, 1), s },
		"ciphertext":   func() (string, []byte, *sealer) { return "heads/abc", flip(sealed, 1+12+3), s },
		"tag":          func() (string, []byte, *sealer) { return "heads/abc", flip(sealed, len(sealed)-1), s },
		"truncated":    func() (string, []byte, *sealer) { return "heads/abc", sealed[:len(sealed)-1], s },
		"too short":    func() (string, []byte, *sealer) { return "heads/abc", sealed[:sealOverhead-1], s },
		"empty":        func() (string, []byte, *sealer) { return "heads/abc", nil, s },
		"other name":   func() (string, []byte, *sealer) { return "heads/abd", sealed, s },
		"other dir":    func() (string, []byte, *sealer) { return "leases/abc", sealed, s },
		"other key":    func() (string, []byte, *sealer) { return "heads/abc", sealed, testSealer(t, other) },
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			n, b, by := c()
			got, err := by.open(n, b)
			if !errors.Is(err, cas.ErrCorrupt) || got != nil {
				t.Fatalf("open: %q, %v; want cas.ErrCorrupt", got, err)
			}
		})
	}
	if got, err := s.open("heads/abc", sealed); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("the untouched object: %v", err)
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x01
	return c
}

// Names are an HMAC of the plain layout's key: the same for every client
// of one key (so chunks dedupe), different per directory and per key,
// and pinned here so that a change of derivation cannot go unnoticed (it
// would orphan every object of every encrypted remote). The pinned name
// was computed apart from this code, from RFC 5869 and RFC 2104.
func TestObjectNames(t *testing.T) {
	ref := cas.Sum([]byte("hello"))
	a, b := testSealer(t, fixedKey()), testSealer(t, fixedKey())
	name := a.name("chunks/" + ref.Hex())
	const want = "8faf01e919c56506def254188b1bf3352f949d908f19a5c57b30f3c81451fbbb"
	if name != want {
		t.Errorf("name of chunks/%s: %s, want %s", ref.Hex(), name, want)
	}
	if b.name("chunks/"+ref.Hex()) != name {
		t.Error("two sealers of one key name a chunk differently")
	}
	if !isFullID(name) || strings.Contains(name, ref.Hex()[:8]) {
		t.Errorf("name %s: want 64 hex digits unrelated to the ref", name)
	}
	other := fixedKey()
	other[31] ^= 0x80
	for what, n := range map[string]string{
		"another key":  testSealer(t, other).name("chunks/" + ref.Hex()),
		"another dir":  a.name("snapshots/" + ref.Hex()),
		"another name": a.name("chunks/" + cas.Sum([]byte("hello!")).Hex()),
	} {
		if n == name {
			t.Errorf("%s gives the same name", what)
		}
	}
	// The remote's naming goes through it, and a plain remote's is plain.
	enc := &Remote{prefix: "p/", crypt: a}
	plain := &Remote{prefix: "p/"}
	if enc.chunkKey(ref) != "p/chunks/"+name || plain.chunkKey(ref) != "p/chunks/"+ref.Hex() {
		t.Errorf("chunk keys: %s, %s", enc.chunkKey(ref), plain.chunkKey(ref))
	}
	if plain.headKey("s") != "p/heads/s" || enc.headKey("s") != "p/heads/"+a.name("heads/s") {
		t.Errorf("head keys: %s, %s", plain.headKey("s"), enc.headKey("s"))
	}
	if plain.leaseKey("s") != "p/leases/s" || enc.leaseKey("s") == enc.headKey("s") {
		t.Errorf("lease keys: %s, %s", plain.leaseKey("s"), enc.leaseKey("s"))
	}
}

func TestParseKey(t *testing.T) {
	k := fixedKey()
	good := map[string][]byte{
		"raw":            k,
		"hex":            []byte(hex.EncodeToString(k)),
		"hex, newline":   []byte(hex.EncodeToString(k) + "\n"),
		"HEX":            []byte(strings.ToUpper(hex.EncodeToString(k))),
		"base64":         []byte(base64.StdEncoding.EncodeToString(k) + "\n"),
		"base64 url raw": []byte(base64.RawURLEncoding.EncodeToString(k)),
	}
	for name, in := range good {
		got, err := parseKey(in)
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("%s: %x, %v", name, got, err)
		}
	}
	bad := map[string][]byte{
		"empty":       nil,
		"31 bytes":    k[:31],
		"33 bytes":    append(bytes.Clone(k), 0),
		"short hex":   []byte(hex.EncodeToString(k[:31])),
		"passphrase":  []byte("correct horse battery staple\n"),
		"32 letters":  []byte("abcdefghijklmnopqrstuvwxyz012345"),
		"long base64": []byte(base64.StdEncoding.EncodeToString(append(bytes.Clone(k), 1))),
	}
	for name, in := range bad {
		if got, err := parseKey(in); err == nil {
			t.Errorf("%s: accepted as %x", name, got)
		}
	}
}

func TestEncryptionLoad(t *testing.T) {
	ctx := context.Background()
	k := fixedKey()
	dir := t.TempDir()
	file := filepath.Join(dir, "key")
	if err := os.WriteFile(file, []byte(hex.EncodeToString(k)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOMEFS_CRYPT_TEST_KEY", base64.StdEncoding.EncodeToString(k))
	for _, e := range []Encryption{
		{KeyFile: file},
		{KeyEnv: "HOMEFS_CRYPT_TEST_KEY"},
		{KeyCommand: "cat " + file},
	} {
		got, err := loadKey(ctx, e, "r")
		if err != nil || !bytes.Equal(got, k) {
			t.Errorf("%s: %x, %v", e, got, err)
		}
	}
	for e, want := range map[Encryption]string{
		{KeyFile: filepath.Join(dir, "missing")}:         "no such file",
		{KeyEnv: "HOMEFS_CRYPT_TEST_UNSET"}:              "not set in the daemon's environment",
		{KeyCommand: "echo vault is sealed >&2; exit 3"}: "vault is sealed",
		{KeyCommand: "echo short"}:                       "want 32 bytes",
	} {
		_, err := loadKey(ctx, e, "r")
		if !errors.Is(err, ErrKeySource) || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "remote r: ") {
			t.Errorf("%s: %v, want ErrKeySource saying %q", e, err, want)
		}
	}
}

func TestEncryptionConfig(t *testing.T) {
	base := Config{Name: "r", URL: "s3://b/p"}
	for _, e := range []Encryption{{}, {KeyFile: "/k"}, {KeyEnv: "K"}, {KeyCommand: "pass show k"}} {
		c := base
		c.Encryption = e
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", e, err)
		}
	}
	for _, e := range []Encryption{{KeyFile: "/k", KeyEnv: "K"}, {KeyFile: "relative/k"}, {KeyEnv: "A=B"}} {
		c := base
		c.Encryption = e
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: accepted", e)
		}
	}
	// A plain remote's registry entry is as it was.
	b, err := json.Marshal(base)
	if err != nil || string(b) != `{"name":"r","url":"s3://b/p"}` {
		t.Errorf("plain config: %s, %v", b, err)
	}
	base.Encryption = Encryption{KeyEnv: "K"}
	if b, _ := json.Marshal(base); string(b) != `{"name":"r","url":"s3://b/p","encryption":{"key_env":"K"}}` {
		t.Errorf("encrypted config: %s", b)
	}
}

// BenchmarkSeal: what an encrypted remote adds per 64 KiB chunk, apart
// from the network: sealing on push, opening on a lazy read, and the
// HMAC that names it.
func BenchmarkSeal(b *testing.B) {
	s, err := newSealer(fixedKey())
	if err != nil {
		b.Fatal(err)
	}
	chunk := randomBytes(1, 64<<10)
	sealed := s.seal("chunks/x", chunk)
	b.Run("seal", func(b *testing.B) {
		b.SetBytes(int64(len(chunk)))
		for range b.N {
			s.seal("chunks/x", chunk)
		}
	})
	b.Run("open", func(b *testing.B) {
		b.SetBytes(int64(len(chunk)))
		for range b.N {
			if _, err := s.open("chunks/x", sealed); err != nil {
				b.Fatal(err)
			}
		}
	})
	ref := cas.Sum(chunk).Hex()
	b.Run("name", func(b *testing.B) {
		for range b.N {
			s.name("chunks/" + ref)
		}
	})
}
