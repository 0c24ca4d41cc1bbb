package remote

import (
	"crypto/md5"
	"encoding/hex"
	"testing"
)

func TestEtagMatches(t *testing.T) {
	body := []byte(`{"version":1}`)
	sum := md5.Sum(body)
	md5hex := hex.EncodeToString(sum[:])
	for _, c := range []struct {
		etag string
		want bool
	}{
		{`"` + md5hex + `"`, true},
		{md5hex, true},
		{`"00000000000000000000000000000000"`, false}, // an MD5, of other bytes
		{`"` + md5hex + `-2"`, true},                  // multipart: not checkable
		{`"kms-opaque-etag"`, true},
	} {
		if got := etagMatches(c.etag, body); got != c.want {
			t.Errorf("etagMatches(%s) = %v, want %v", c.etag, got, c.want)
		}
	}
}
