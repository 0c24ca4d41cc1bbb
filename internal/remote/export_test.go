package remote

// ChunkKey is the object key of a chunk (prefix included), for the
// external tests that damage or remove objects on the server.
var ChunkKey = (*Remote).chunkKey
