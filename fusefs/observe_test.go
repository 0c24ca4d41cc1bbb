package fusefs

import (
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// gateOverStub is a gate over a file system that answers at once (GETATTR
// with success, the rest ENOSYS): what a request costs the gate alone.
func gateOverStub(obs Observer) *rawGate {
	return &rawGate{RawFileSystem: stubFS{fuse.NewDefaultRawFileSystem()}, obs: obs}
}

type stubFS struct{ fuse.RawFileSystem }

func (stubFS) GetAttr(<-chan struct{}, *fuse.GetAttrIn, *fuse.AttrOut) fuse.Status { return fuse.OK }

// TestGateObserves: every request the gate serves reaches the observer
// with its opcode and errno, at no allocation.
func TestGateObserves(t *testing.T) {
	rec := &recordingObserver{}
	g := gateOverStub(rec)
	var out fuse.AttrOut
	g.GetAttr(nil, &fuse.GetAttrIn{}, &out)
	g.Write(nil, &fuse.WriteIn{}, nil)
	if rec.ops[OpGetAttr] != 1 || rec.ops[OpWrite] != 1 || rec.errnos[0] != 1 || rec.errnos[syscall.ENOSYS] != 1 {
		t.Fatalf("observed %v, errnos %v; want a getattr answered and a write refused with ENOSYS", rec.ops, rec.errnos)
	}
	g.obs = newBenchObserver()
	in := &fuse.GetAttrIn{}
	if n := testing.AllocsPerRun(100, func() { g.GetAttr(nil, in, &out) }); n > 0 {
		t.Errorf("an observed request allocates %v times", n)
	}
}

type recordingObserver struct {
	ops    [NumOps]int
	errnos map[syscall.Errno]int
}

func (r *recordingObserver) Request(op Op, errno syscall.Errno, _ time.Duration) {
	r.ops[op]++
	if r.errnos == nil {
		r.errnos = make(map[syscall.Errno]int)
	}
	r.errnos[errno]++
}

func (r *recordingObserver) Flush(time.Duration, error) {}

// BenchmarkGateObserver: what observing costs one request, apart from the
// kernel and the file system (off: no observer; on: the daemon's metrics,
// as benchObserver mirrors them).
func BenchmarkGateObserver(b *testing.B) {
	for _, bc := range []struct {
		name string
		obs  Observer
	}{{"off", nil}, {"on", newBenchObserver()}} {
		b.Run(bc.name, func(b *testing.B) {
			g := gateOverStub(bc.obs)
			var out fuse.AttrOut
			in := &fuse.GetAttrIn{}
			b.ReportAllocs()
			for b.Loop() {
				g.GetAttr(nil, in, &out)
			}
		})
	}
}
