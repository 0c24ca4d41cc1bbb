package stored

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/cas/internal/gen"
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
		got, err := DecodeUnverified(v)
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
		plain, err := DecodeUnverified(v)
		if err != nil {
			return
		}
		back, err := DecodeUnverified(encodeChunk(plain))
		if err != nil || !bytes.Equal(back, plain) {
			t.Fatalf("re-encode round trip: %v", err)
		}
	})
}

// BenchmarkZstdLevel compares the encoder levels on 64 KiB chunks: speed
// of EncodeAll and DecodeAll, and the ratio. The store uses SpeedDefault.
func BenchmarkZstdLevel(b *testing.B) {
	inputs := map[string][]byte{"jsonl": gen.JSONL(64<<10, 1), "random": pseudoRandom(64 << 10)}
	for _, lvl := range []zstd.EncoderLevel{zstd.SpeedFastest, zstd.SpeedDefault} {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(lvl), zstd.WithLowerEncoderMem(true), zstd.WithEncoderConcurrency(1))
		if err != nil {
			b.Fatal(err)
		}
		for _, kind := range []string{"jsonl", "random"} {
			in := inputs[kind]
			out := enc.EncodeAll(in, nil)
			b.Run(fmt.Sprintf("encode/%s/%s", lvl, kind), func(b *testing.B) {
				b.SetBytes(int64(len(in)))
				var dst []byte
				for b.Loop() {
					dst = enc.EncodeAll(in, dst[:0])
				}
				b.ReportMetric(float64(len(out))/float64(len(in)), "ratio")
			})
			b.Run(fmt.Sprintf("decode/%s/%s", lvl, kind), func(b *testing.B) {
				b.SetBytes(int64(len(in)))
				dst := make([]byte, 0, len(in))
				for b.Loop() {
					if dst, err = decoder().DecodeAll(out, dst[:0]); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// TestDecodeChecks: Decode returns the plain bytes of a good form, and
// ErrCorrupt (never the bytes) for a form that does not decode or decodes
// to other content; Encode refuses a chunk over cas.MaxChunkSize.
func TestDecodeChecks(t *testing.T) {
	data := bytes.Repeat([]byte("homefs stores agent rollouts\n"), 100)
	ref := cas.Sum(data)
	v, err := Encode(data)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Decode(ref, v); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Decode of a good form: %v", err)
	}
	if n, err := Size(v); err != nil || n != int64(len(data)) {
		t.Fatalf("Size: %d, %v", n, err)
	}
	flipped := bytes.Clone(v)
	flipped[len(flipped)-1] ^= 0xff
	other, _ := Encode([]byte("other content"))
	for name, form := range map[string][]byte{"flipped": flipped, "other": other, "short": {0}, "codec": {9, 0}} {
		got, err := Decode(ref, form)
		if !errors.Is(err, cas.ErrCorrupt) || got != nil {
			t.Errorf("%s: Decode = %d bytes, %v; want ErrCorrupt", name, len(got), err)
		}
	}
	if _, err := Size([]byte{9, 0}); !errors.Is(err, cas.ErrCorrupt) {
		t.Errorf("Size of an unknown codec: %v", err)
	}
	if _, err := Encode(make([]byte, cas.MaxChunkSize+1)); !errors.Is(err, cas.ErrTooLarge) {
		t.Errorf("Encode over MaxChunkSize: %v", err)
	}
}

// DecodeUnverifiedInto decodes into its buffer when the plain bytes fit,
// by either codec, and into a new slice when they do not.
func TestDecodeInto(t *testing.T) {
	for _, data := range [][]byte{
		bytes.Repeat([]byte("homefs stores agent rollouts\n"), 100), // zstd
		pseudoRandom(4096), // raw
	} {
		v := encodeChunk(data)
		room := bytes.Repeat([]byte{0xff}, len(data)+100)
		got, err := DecodeUnverifiedInto(room, v)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("codec %d: decode into room: %v", v[0], err)
		}
		if &got[0] != &room[0] {
			t.Errorf("codec %d: decoded outside the room given", v[0])
		}
		if n := testing.AllocsPerRun(10, func() { _, _ = DecodeUnverifiedInto(room, v) }); n > 0 && !raceEnabled {
			t.Errorf("codec %d: %.0f allocations a decode into room", v[0], n)
		}
		small := make([]byte, len(data)-1)
		got, err = DecodeUnverifiedInto(small, v)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("codec %d: decode past the room: %v", v[0], err)
		}
		if &got[0] == &small[:1][0] {
			t.Errorf("codec %d: decoded into a buffer too small", v[0])
		}
	}
}
