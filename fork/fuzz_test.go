package fork_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/fork"
)

// seedFiles adds every regular file under dir (cut to limit bytes) as a
// fuzz seed.
func seedFiles(f *testing.F, dir string, limit int) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b[:min(len(b), limit)])
			}
		}
		return nil
	})
}

func FuzzRecordReader(f *testing.F) {
	seedFiles(f, fixtureDir, 8<<10)
	f.Add([]byte("{}\n[]\n\n{\"a\":1}"))
	f.Add([]byte("{\"a\":\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rr := fork.NewRecordReader(bytes.NewReader(data))
		var off int64
		lines := strings.SplitAfter(string(data), "\n")
		if len(lines) > 0 && lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		}
		for i := 0; ; i++ {
			rec, err := rr.Next()
			if err == io.EOF {
				if i != len(lines) {
					t.Fatalf("%d records, want %d", i, len(lines))
				}
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			want := strings.TrimSuffix(lines[i], "\n")
			if rec.Offset != off || string(rec.Line) != want {
				t.Fatalf("record %d at %d: %q, want %q at %d", i, rec.Offset, rec.Line, want, off)
			}
			var obj map[string]any
			isObj := json.Unmarshal(rec.Line, &obj) == nil && obj != nil
			if rec.Damaged == isObj {
				t.Fatalf("record %d %q: damaged=%v, decodes as object=%v", i, rec.Line, rec.Damaged, isObj)
			}
			off += int64(len(lines[i]))
		}
		// The same bytes stored as a file scan without error for every
		// provider, chunk by chunk.
		ctx := context.Background()
		store := cas.NewMemory()
		e, _, err := fork.PutFile(ctx, store, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range fork.Providers() {
			p, _ := fork.Lookup(name)
			info, err := fork.ScanRollout(ctx, store, p, &e)
			if err != nil && !isDamagedErr(err) {
				t.Fatalf("%s: ScanRollout: %v", name, err)
			}
			if err == nil && info.Records != int64(len(lines)) {
				t.Fatalf("%s: %d records, want %d", name, info.Records, len(lines))
			}
		}
	})
}

func isDamagedErr(err error) bool {
	return errors.Is(err, fork.ErrDamaged) || errors.Is(err, fork.ErrTooLarge)
}

func FuzzDecodeNative(f *testing.F) {
	seedFiles(f, nativeDir, 1<<20)
	f.Add([]byte(`{"version":2,"handles":{},"files":{}}`))
	f.Add([]byte(`{"version":2,"blobStore":"juicefs","handles":{"pi":{"id":"a","through":""}},"files":{"pi/x.jsonl":{"key":"` + zeroKey + `","bytes":0}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := fork.DecodeNative(data)
		if err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("decoded but invalid: %v", err)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		s2, err := fork.DecodeNative(b)
		if err != nil {
			t.Fatalf("re-encoded form does not decode: %v\n%s", err, b)
		}
		if !reflect.DeepEqual(s, s2) {
			t.Fatalf("round trip changed the snapshot")
		}
		for p := range s.Files {
			if _, err := fork.NativeToSession(p); err != nil {
				t.Fatalf("decoded path %q does not map: %v", p, err)
			}
		}
	})
}

func FuzzValidateNativePath(f *testing.F) {
	for _, p := range []string{"workspace/a", "workspace/.conversation/x", "workspace/.checkpoint-1", "codex/sessions/a.jsonl",
		"claude/projects/x/y.jsonl", "pi/a.jsonl", "workspace/a\\b", "workspace/../x", "workspace//x"} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if fork.ValidateNativePath(p) != nil {
			return
		}
		if strings.Contains(p, "\\") || strings.Contains(p, "//") || strings.HasPrefix(p, "/") || strings.HasSuffix(p, "/") {
			t.Fatalf("%q accepted", p)
		}
		for _, seg := range strings.Split(p, "/") {
			if seg == "." || seg == ".." || seg == "" {
				t.Fatalf("%q accepted with segment %q", p, seg)
			}
		}
		if strings.HasPrefix(p, "workspace/.conversation/") || strings.HasPrefix(p, "workspace/.checkpoint-") {
			t.Fatalf("%q accepted", p)
		}
		sp, err := fork.NativeToSession(p)
		if err != nil {
			t.Fatal(err)
		}
		back, ok := fork.SessionToNative(sp)
		if !ok || back != p {
			t.Fatalf("%q → %q → %q, %v", p, sp, back, ok)
		}
	})
}
