package archive

import (
	"flag"
	"os"
	"testing"
)

// TestMain gives the fuzzer 2 s, not Go's default 60 s, to minimize each
// new input, unless -test.fuzzminimizetime says otherwise. Go's minimizer
// tries removing every range of bytes, quadratic in the input's length;
// a tar stream is made of 512-byte blocks, and minimizing one of a few
// KB ran for most of the 60 s each time, so that a minute of FuzzImport
// ran a few dozen inputs and found nothing new.
func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.fuzzminimizetime" })
	if !set {
		if err := flag.Set("test.fuzzminimizetime", "2s"); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
