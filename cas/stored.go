package cas

import "fmt"

// EncodeStored returns the stored form of data (codec byte, plain size,
// payload), the same bytes a store keeps. Stores that live outside this
// package (a remote tier) keep chunks in this form, so a chunk is
// compressed once and verified the same way everywhere.
func EncodeStored(data []byte) ([]byte, error) {
	if len(data) > MaxChunkSize {
		return nil, tooLarge(len(data))
	}
	return encodeChunk(data), nil
}

// DecodeStored returns the plain bytes of a stored form after checking that
// they hash to ref. A form that does not decode, or decodes to other
// content, is an error wrapping ErrCorrupt; its bytes are never returned.
func DecodeStored(ref Ref, stored []byte) ([]byte, error) {
	plain, err := decodeChunk(stored)
	if err != nil {
		return nil, corruptErr(ref, err)
	}
	if err := verifyChunk(ref, plain); err != nil {
		return nil, err
	}
	return plain, nil
}

// StoredSize returns the plain size a stored form declares, without
// decoding it.
func StoredSize(stored []byte) (int64, error) {
	_, size, _, err := chunkHeader(stored)
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return size, nil
}
