// Package manifest is the homefs data model and its one canonical encoding.
//
// Terms:
//
//   - An entry is one name in a directory: a file, a directory, a
//     symlink or a special file (a fifo, a socket, a character or block
//     device node: attributes and a device number, no content), with its
//     metadata. A file's content is a list of chunk refs
//     (each covering ChunkSize bytes; a zero ref is a hole).
//   - The chunk-length rule: every stored chunk of a file but the last
//     holds exactly ChunkSize bytes, and the last exactly the file's
//     remaining bytes (ChunkLen). A chunk shorter or longer than that is
//     invalid (CheckChunk), whatever its bytes: readers, fsck and export
//     need no padding and no guess, and equal content has equal refs. So a
//     file that grows past a stored short last chunk stores that chunk
//     again at its new length (one chunk, never the file); the chunks
//     beyond it are holes.
//   - A tree node is the CAS object holding one directory: its entries,
//     sorted bytewise by name, in a compact binary encoding (EncodeTree).
//     A directory entry points at its tree node by ref.
//   - An index node is the CAS object listing the chunk refs of a large
//     file (more than MaxInlineChunks chunks): up to IndexFanout refs to
//     chunks (depth 1) or to index nodes one level down (depth > 1). Small
//     files keep their chunk refs inline in the entry.
//   - A snapshot record is the canonical JSON (EncodeSnapshot) naming a
//     session's root tree at one point in time, with its lineage; its ID is
//     the hex ref of those bytes (SnapshotID).
//   - The Merkle structure is the DAG formed by snapshot → root tree →
//     tree nodes → index nodes → chunks. Because every node names its
//     children by content hash, equal refs mean equal subtrees: Diff and
//     capture skip them, and a change re-writes only the path to the root.
//
// Every encoding has exactly one accepted form: decoders reject unknown
// versions, trailing bytes, non-minimal varints and anything that fails
// validation, so decode followed by encode gives back the same bytes and
// the same ref. The encodings are pinned by golden files in
// testdata/golden (regenerate with go test ./manifest -update).
package manifest
