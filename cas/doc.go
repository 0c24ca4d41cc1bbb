// Package cas is homefs's content-addressed store.
//
// Terms:
//   - A chunk is an immutable byte string of at most MaxChunkSize bytes: a
//     piece of a file or an encoded manifest node.
//   - A Ref is the SHA-256 of a chunk's plain (uncompressed) bytes; the
//     store files the chunk under it, so equal content is stored once
//     (dedup) and any damage is detectable.
//   - A store keeps each chunk in a stored form of its choice (package
//     stored: raw or zstd) and re-hashes the plain bytes on every Get; a
//     mismatch is ErrCorrupt and the bytes are never returned.
//   - Names are a small mutable namespace beside the chunks (session heads,
//     snapshot records), updated atomically with compare-and-set (Expect).
//   - Sync (or a durable commit) is the durability point: writes before it
//     survive a crash of the process or the machine; writes after it may not.
//
// Package cas holds the contract (the small interfaces composed into Store,
// the errors, the Names rules) and MemoryStore, a store for tests that keeps
// chunks plain (uncompressed) but re-hashes them on Get all the same. The
// disk store is package badgerstore. Both pass the conformance suite in
// package castest. Package cas imports neither Badger nor zstd (the
// stored form is package stored), so that a program that only names refs
// does not link them; the CLI links no Badger.
package cas
