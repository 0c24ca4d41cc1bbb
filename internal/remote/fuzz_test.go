package remote

import (
	"strings"
	"testing"
)

// FuzzParseURL: an accepted URL gives a bucket and a prefix without empty,
// "." or ".." segments, and parsing s3://BUCKET/PREFIX again gives them
// back.
func FuzzParseURL(f *testing.F) {
	for _, s := range []string{"s3://b", "s3://b/p/q", "s3://b/../x", "http://b/p", "s3://u@b/p", "s3://b/p?x=1", "s3:///p", "s3://b//p"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		bucket, prefix, err := ParseURL(s)
		if err != nil {
			return
		}
		if bucket == "" {
			t.Fatalf("ParseURL(%q): empty bucket", s)
		}
		if prefix != "" {
			for _, seg := range strings.Split(prefix, "/") {
				if seg == "" || seg == "." || seg == ".." {
					t.Fatalf("ParseURL(%q): prefix %q has segment %q", s, prefix, seg)
				}
			}
		}
		u := "s3://" + bucket
		if prefix != "" {
			u += "/" + prefix
		}
		b2, p2, err := ParseURL(u)
		if err != nil || b2 != bucket || p2 != prefix {
			t.Fatalf("ParseURL(%q) = %q %q, but ParseURL(%q) = %q %q, %v", s, bucket, prefix, u, b2, p2, err)
		}
	})
}
