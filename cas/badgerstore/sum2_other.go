//go:build !amd64

package badgerstore

// haveSum2 is false: sum2 computes one hash after the other.
const haveSum2 = false

func blocks2(da, db *[8]uint32, pa, pb []byte) { panic("cas: blocks2 without an implementation") }
