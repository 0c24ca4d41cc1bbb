package cas

import (
	"bytes"
	"testing"
)

func TestEncodeChunkChoosesCodec(t *testing.T) {
	tests := []struct {
		name  string
		data  []byte
		codec byte
	}{
		{"empty", nil, codecRaw},
		{"tiny", []byte("abc"), codecRaw},
		{"zeros", make([]byte, 4096), codecZstd},
		{"text", bytes.Repeat([]byte("homefs stores agent rollouts\n"), 100), codecZstd},
		{"random", pseudoRandom(4096), codecRaw},
	}
	for _, tt := range tests {
		v := encodeChunk(tt.data)
		if v[0] != tt.codec {
			t.Errorf("%s: codec %d, want %d", tt.name, v[0], tt.codec)
		}
		got, err := decodeChunk(v)
		if err != nil || !bytes.Equal(got, tt.data) {
			t.Errorf("%s: decode: %v", tt.name, err)
		}
		if tt.codec == codecRaw && len(v) > len(tt.data)+4 {
			t.Errorf("%s: raw form has %d bytes of overhead", tt.name, len(v)-len(tt.data))
		}
	}
}

func pseudoRandom(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// FuzzDecodeChunk: the decoder never panics or over-allocates on damaged
// input, and whatever it accepts re-encodes to the same plain bytes.
func FuzzDecodeChunk(f *testing.F) {
	f.Add(encodeChunk(nil))
	f.Add(encodeChunk([]byte("hello")))
	f.Add(encodeChunk(make([]byte, 1000)))
	f.Add(encodeChunk(bytes.Repeat([]byte("abc\n"), 300)))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, v []byte) {
		plain, err := decodeChunk(v)
		if err != nil {
			return
		}
		back, err := decodeChunk(encodeChunk(plain))
		if err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("re-encode round trip: %v", err)
		}
	})
}
