// Package cas is homefs's content-addressed store.
//
// Terms:
//   - A chunk is an immutable byte string of at most MaxChunkSize bytes: a
//     piece of a file or an encoded manifest node.
//   - A Ref is the SHA-256 of a chunk's plain (uncompressed) bytes; the
//     store files the chunk under it, so equal content is stored once
//     (dedup) and any damage is detectable.
//   - The stored form of a chunk is a codec byte (raw or zstd), the plain
//     length as a uvarint, and the payload. Chunks are compressed only when
//     that saves at least an eighth. Stored bytes are re-hashed on every
//     Get; a mismatch is ErrCorrupt and the bytes are never returned.
//   - Names are a small mutable namespace beside the chunks (session heads,
//     snapshot records), updated atomically with compare-and-set (Expect).
//   - Sync (or a durable commit) is the durability point: writes before it
//     survive a crash of the process or the machine; writes after it may not.
//
// Two stores implement Store: BadgerStore on disk (one process per
// directory) and MemoryStore for tests, which keeps chunks plain
// (uncompressed) but re-hashes them on Get all the same. Both pass the
// conformance suite in package castest.
package cas
