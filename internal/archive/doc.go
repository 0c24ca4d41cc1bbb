// Package archive moves trees between homefs and tar streams.
//
// Terms:
//   - Import reads a tar stream and stores its files as chunks of
//     manifest.ChunkSize (all-zero chunks become holes) and its directories
//     as tree nodes, returning the root ref; it names nothing, so a caller
//     creates the session afterwards in one step. Entries that could escape
//     the tree are refused: absolute paths, ".." segments, symlinks whose
//     target leaves the tree, hard links to anything but an earlier file,
//     and devices, fifos and sockets. A malformed stream is refused whole.
//   - Export writes the tree at a root as a PAX tar stream, reading every
//     chunk through the store, which verifies it.
//   - TarDir and Extract are the local halves used by the CLI: a directory
//     into a tar stream, and a tar stream into an empty directory without
//     ever following a symlink it created.
package archive
