package badgerstore

import (
	"encoding/binary"

	"github.com/homefs/homefs/cas"
)

// sum2 returns the Refs of a and b. Where the CPU has the SHA extensions
// and a and b are of one length (two full chunks), it computes both hashes
// at once on one core, in nearly the time of one: a single SHA-256 waits
// on each round's result before the next, and two interleaved hide each
// other's waits (BenchmarkSum2).
func sum2(a, b []byte) (cas.Ref, cas.Ref) {
	if !haveSum2 || len(a) != len(b) {
		return cas.Sum(a), cas.Sum(b)
	}
	ha, hb := sha256IV, sha256IV
	full := len(a) &^ 63
	blocks2(&ha, &hb, a[:full], b[:full])
	var ta, tb [128]byte
	n := padTail(&ta, a[full:], len(a))
	padTail(&tb, b[full:], len(b))
	blocks2(&ha, &hb, ta[:n], tb[:n])
	return digestRef(&ha), digestRef(&hb)
}

// sha256IV is SHA-256's initial hash value (FIPS 180-4, 5.3.3).
var sha256IV = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// padTail writes a message's last partial block (tail, under 64 bytes)
// and SHA-256's padding for a message of total bytes into dst, and returns
// how many bytes of dst hold blocks (64 or 128).
func padTail(dst *[128]byte, tail []byte, total int) int {
	n := copy(dst[:], tail)
	dst[n] = 0x80
	size := 64
	if n >= 56 {
		size = 128
	}
	binary.BigEndian.PutUint64(dst[size-8:size], uint64(total)*8)
	return size
}

// digestRef returns the big-endian bytes of a final hash value.
func digestRef(h *[8]uint32) cas.Ref {
	var r cas.Ref
	for i, v := range h {
		binary.BigEndian.PutUint32(r[4*i:], v)
	}
	return r
}
