// Package archive moves trees between homefs and tar streams.
//
// Terms:
//   - Import reads a tar stream and stores its files as chunks of
//     manifest.ChunkSize (all-zero chunks become holes) and its directories
//     as tree nodes, returning the root ref; it names nothing, so a caller
//     creates the session afterwards in one step. Entries that could write
//     outside the tree are refused: absolute names, ".." segments, names
//     below a symlink, hard links to anything but an earlier
//     non-directory; so are device nodes unless the caller allows them
//     (ImportOptions.Devices). Fifos are kept; sockets never come, since
//     tar has no type for them (TarDir and Export skip them, as GNU tar
//     does). A symlink is kept with
//     its target byte for byte, wherever it points (absolute, or out of
//     the tree): it is never followed. A malformed stream is refused whole.
//     So is a file over MaxFileSize, by its header, and a sparse file
//     (tar --sparse), whose holes archive/tar would make up as zeros
//     without reading input: every entry costs what its bytes in the
//     stream cost.
//   - Export writes the tree at a root as a PAX tar stream, reading every
//     chunk through the store, which verifies it.
//   - TarDir and Extract are the local halves used by the CLI: a directory
//     into a tar stream (symlinks as links), and a tar stream into an
//     empty directory without ever following a symlink it created;
//     it refuses sparse files as Import does.
package archive
