// Package fsck checks and measures a store.
//
// Check reads every object reachable from the catalog (session heads and
// every indexed snapshot): snapshot records, tree nodes, index nodes and
// file chunks, each through the store's Get, which re-hashes it. It goes
// on past a problem and reports each one with its owner (a session or a
// snapshot) and the path inside it. An object shared by several owners is
// read once; a damaged one is reported for every owner. A chunk's length
// is checked at every use against the chunk-length rule
// (manifest.CheckChunk), since it depends on the file that names it: one
// chunk may be right in one file and wrong in another. A Verifier does the
// same for one tree at a time, remembering what it verified.
//
// Stats counts sessions and snapshots, the logical bytes they hold (the
// sum of their file sizes, as if nothing were shared), and the plain and
// stored bytes of the distinct chunks in the store: logical/plain is the
// dedup ratio, plain/stored the compression ratio.
package fsck
