package badgerstore

import (
	"crypto/sha256"
	"math/rand/v2"
	"testing"

	"github.com/homefs/homefs/cas"
)

// sum2 agrees with crypto/sha256 on every length around the block and
// padding boundaries, on a full chunk, and on pairs of different lengths.
func TestSum2(t *testing.T) {
	if !haveSum2 {
		t.Log("no SHA extensions: sum2 hashes one message after the other")
	}
	rng := rand.New(rand.NewPCG(1, 2))
	lengths := []int{cas.MaxChunkSize / 16, 64 << 10, 64<<10 - 1, 4096 + 55, 4096 + 56}
	for n := range 200 {
		lengths = append(lengths, n)
	}
	for _, n := range lengths {
		a, b := make([]byte, n), make([]byte, n)
		for i := range a {
			a[i], b[i] = byte(rng.Uint32()), byte(rng.Uint32())
		}
		checkSum2(t, a, b)
		checkSum2(t, a, a)
		if n > 0 {
			checkSum2(t, a, b[1:])
		}
	}
}

func checkSum2(t *testing.T, a, b []byte) {
	t.Helper()
	ra, rb := sum2(a, b)
	if want := cas.Ref(sha256.Sum256(a)); ra != want {
		t.Fatalf("len %d and %d: first hash %s, want %s", len(a), len(b), ra.Short(), want.Short())
	}
	if want := cas.Ref(sha256.Sum256(b)); rb != want {
		t.Fatalf("len %d and %d: second hash %s, want %s", len(a), len(b), rb.Short(), want.Short())
	}
}

func FuzzSum2(f *testing.F) {
	f.Add([]byte("abc"), byte(0))
	f.Add(make([]byte, 200), byte(7))
	f.Fuzz(func(t *testing.T, a []byte, x byte) {
		b := append([]byte(nil), a...)
		if len(b) > 0 {
			b[int(x)%len(b)] ^= x | 1
		}
		checkSum2(t, a, b)
	})
}

// BenchmarkSum2 hashes two 64 KiB chunks together; BenchmarkSum2/apart
// one after the other with crypto/sha256.
func BenchmarkSum2(b *testing.B) {
	x, y := make([]byte, 64<<10), make([]byte, 64<<10)
	b.Run("together", func(b *testing.B) {
		b.SetBytes(2 * int64(len(x)))
		for b.Loop() {
			sum2(x, y)
		}
	})
	b.Run("apart", func(b *testing.B) {
		b.SetBytes(2 * int64(len(x)))
		for b.Loop() {
			cas.Sum(x)
			cas.Sum(y)
		}
	})
}
