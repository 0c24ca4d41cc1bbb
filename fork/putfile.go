package fork

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// PutFile stores the bytes of r as a file, one manifest.ChunkSize chunk at
// a time, and returns a file entry (mode 0644, no name) naming them, and
// the SHA-256 of the whole content.
func PutFile(ctx context.Context, p cas.Putter, r io.Reader) (manifest.Entry, [sha256.Size]byte, error) {
	var digest [sha256.Size]byte
	h := sha256.New()
	list := manifest.NewChunkList()
	buf := make([]byte, manifest.ChunkSize)
	var size int64
	for i := 0; ; i++ {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			ref, perr := p.Put(ctx, buf[:n])
			if perr != nil {
				return manifest.Entry{}, digest, fmt.Errorf("fork: put chunk %d: %w", i, perr)
			}
			list.Set(i, ref)
			size += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			break
		}
		if err != nil {
			return manifest.Entry{}, digest, err
		}
	}
	chunks, index, depth, err := list.Store(ctx, p)
	if err != nil {
		return manifest.Entry{}, digest, err
	}
	h.Sum(digest[:0])
	return manifest.Entry{Kind: manifest.KindFile, Mode: 0o644, Size: size, Chunks: chunks, Index: index, Depth: depth}, digest, nil
}
