package badgerstore

import "golang.org/x/sys/cpu"

// blockSHANI2 runs the SHA-256 compression function over the 64-byte
// blocks of pa on da and of pb on db (pa and pb of one length; a partial
// block at the end is left out). Written by sum2_amd64_gen.go.
//
//go:noescape
func blockSHANI2(da, db *[8]uint32, pa, pb []byte)

//go:generate sh -c "go run sum2_amd64_gen.go > sum2_amd64.s"

// hasSHANI reports whether the CPU has the SHA extensions.
func hasSHANI() bool

// haveSum2: blockSHANI2 also uses SSSE3 (PSHUFB) and SSE4.1 (PBLENDW).
var haveSum2 = hasSHANI() && cpu.X86.HasSSSE3 && cpu.X86.HasSSE41

func blocks2(da, db *[8]uint32, pa, pb []byte) { blockSHANI2(da, db, pa, pb) }
