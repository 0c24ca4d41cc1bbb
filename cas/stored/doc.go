// Package stored is the stored form of a chunk: the bytes a store keeps for
// it, on disk (package badgerstore) and in a remote tier alike.
//
// Terms:
//   - The stored form is a codec byte (raw or zstd), the chunk's plain
//     length as a uvarint, and the payload. A chunk is compressed only when
//     that saves at least an eighth; a large chunk is first probed with a
//     4 KiB sample, so incompressible data costs little.
//   - Decoding a form checks its hash against the chunk's ref (Decode): a
//     form that does not decode, or decodes to other content, is
//     cas.ErrCorrupt and its bytes are never returned. DecodeUnverified
//     leaves the hash to a caller that computes it otherwise.
package stored
