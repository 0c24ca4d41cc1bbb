package stored

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/homefs/homefs/cas"
)

// Codec bytes, the first byte of a chunk's stored form.
const (
	codecRaw  byte = 0
	codecZstd byte = 1
)

// Encode returns the stored form of data, the bytes a store keeps: the
// Badger store and the remote tier alike, so a chunk is compressed once
// and verified the same way everywhere. Data over cas.MaxChunkSize is an
// error wrapping cas.ErrTooLarge.
func Encode(data []byte) ([]byte, error) {
	if len(data) > cas.MaxChunkSize {
		return nil, fmt.Errorf("chunk of %d bytes exceeds %d: %w", len(data), cas.MaxChunkSize, cas.ErrTooLarge)
	}
	return encodeChunk(data), nil
}

// Decode returns the plain bytes of a stored form after checking that they
// hash to ref. A form that does not decode, or decodes to other content, is
// an error wrapping cas.ErrCorrupt; its bytes are never returned.
func Decode(ref cas.Ref, v []byte) ([]byte, error) {
	plain, err := DecodeUnverified(v)
	if err != nil {
		return nil, fmt.Errorf("chunk %s: %w: %v", ref.Short(), cas.ErrCorrupt, err)
	}
	if sum := cas.Sum(plain); sum != ref {
		return nil, fmt.Errorf("chunk %s: content hashes to %s: %w", ref.Short(), sum.Short(), cas.ErrCorrupt)
	}
	return plain, nil
}

// Size returns the plain size a stored form declares, without decoding
// it; a header that does not parse is an error wrapping cas.ErrCorrupt.
func Size(v []byte) (int64, error) {
	_, size, _, err := chunkHeader(v)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", cas.ErrCorrupt, err)
	}
	return size, nil
}

// minCompress is the smallest chunk worth trying to compress; below it the
// zstd frame overhead eats the gain.
const minCompress = 64

// The encoder and decoder are shared by every store in the process: EncodeAll and
// DecodeAll are safe for concurrent use and keep per-goroutine state in
// internal pools, so one of each bounds their memory. SpeedDefault: on
// 64 KiB JSONL chunks it encodes as fast as SpeedFastest (~500 MB/s per
// core) and stores 10% less (BenchmarkZstdLevel).
var (
	encoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil,
			zstd.WithEncoderLevel(zstd.SpeedDefault),
			zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
			zstd.WithLowerEncoderMem(true),
			zstd.WithEncoderCRC(true))
		if err != nil {
			panic(fmt.Sprintf("stored: zstd encoder: %v", err)) // static options
		}
		return e
	})
	decoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil,
			zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxMemory(cas.MaxChunkSize),
			zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			panic(fmt.Sprintf("stored: zstd decoder: %v", err)) // static options
		}
		return d
	})
)

// probeSize is the sample compressed before a large chunk is: random or
// already-compressed data (the common incompressible case) is then stored
// raw after compressing 4 KiB instead of all of it.
const probeSize = 4 << 10

// worthCompressing reports whether a sample of data compresses by at least
// an eighth.
func worthCompressing(data []byte) bool {
	if len(data) < 4*probeSize {
		return true
	}
	sample := data[:probeSize]
	var buf [probeSize + 64]byte
	out := encoder().EncodeAll(sample, buf[:0])
	return len(out) < len(sample)-len(sample)/8
}

// encodeChunk returns the stored form of data in a new slice.
func encodeChunk(data []byte) []byte {
	var hdr [1 + binary.MaxVarintLen64]byte
	hdr[0] = codecRaw
	n := 1 + binary.PutUvarint(hdr[1:], uint64(len(data)))
	out := make([]byte, n, n+len(data))
	copy(out, hdr[:n])
	if len(data) >= minCompress && worthCompressing(data) {
		out[0] = codecZstd
		out = encoder().EncodeAll(data, out)
		if len(out)-n < len(data)-len(data)/8 {
			return out
		}
		// Not worth it: store raw, reusing the buffer when it is big enough.
		if cap(out) < n+len(data) {
			out = make([]byte, n, n+len(data))
		}
		out = out[:n]
		copy(out, hdr[:n])
	}
	out[0] = codecRaw
	return append(out, data...)
}

// chunkHeader parses the codec byte and plain size of a stored chunk.
func chunkHeader(v []byte) (codec byte, size int64, payload []byte, err error) {
	if len(v) < 2 {
		return 0, 0, nil, fmt.Errorf("stored form of %d bytes is too short", len(v))
	}
	size64, n := binary.Uvarint(v[1:])
	if n <= 0 || size64 > cas.MaxChunkSize {
		return 0, 0, nil, fmt.Errorf("bad size header")
	}
	codec = v[0]
	if codec != codecRaw && codec != codecZstd {
		return 0, 0, nil, fmt.Errorf("unknown codec %d", codec)
	}
	return codec, int64(size64), v[1+n:], nil
}

// DecodeUnverified returns the plain bytes of a stored form in a new slice
// without checking them against a ref, for a store that hashes them itself
// (the Badger store hashes two chunks at once). Its error says why v is not
// a stored form; it does not wrap cas.ErrCorrupt.
func DecodeUnverified(v []byte) ([]byte, error) { return DecodeUnverifiedInto(nil, v) }

// DecodeUnverifiedInto is DecodeUnverified into dst's room: the plain
// bytes are dst[:size] when size fits in cap(dst), else a new slice.
func DecodeUnverifiedInto(dst, v []byte) ([]byte, error) {
	codec, size, payload, err := chunkHeader(v)
	if err != nil {
		return nil, err
	}
	switch codec {
	case codecRaw:
		if int64(len(payload)) != size {
			return nil, fmt.Errorf("raw payload of %d bytes, header says %d", len(payload), size)
		}
		var out []byte
		if int64(cap(dst)) >= size {
			out = dst[:size]
		} else {
			// make and copy: the compiler then skips zeroing the new slice.
			out = make([]byte, len(payload))
		}
		copy(out, payload)
		return out, nil
	default:
		// The cap limit makes a lying header fail instead of allocating.
		var room []byte
		if int64(cap(dst)) >= size {
			room = dst[:0:size]
		} else {
			room = make([]byte, 0, size)
		}
		out, err := decoder().DecodeAll(payload, room)
		if err != nil {
			return nil, fmt.Errorf("zstd: %v", err)
		}
		if int64(len(out)) != size {
			return nil, fmt.Errorf("decompressed %d bytes, header says %d", len(out), size)
		}
		return out, nil
	}
}
