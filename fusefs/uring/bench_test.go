package uring

import (
	"testing"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// answerFS answers the benchmarked requests at once, so that what is
// measured is the transport's decoding and reply.
type answerFS struct{ fuse.RawFileSystem }

func (answerFS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	out.Ino = in.NodeId
	return fuse.OK
}

func (answerFS) Lookup(_ <-chan struct{}, _ *fuse.InHeader, _ string, out *fuse.EntryOut) fuse.Status {
	out.NodeId = 2
	return fuse.OK
}

func (answerFS) Write(_ <-chan struct{}, _ *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	return uint32(len(data)), fuse.OK
}

// BenchmarkServe measures a request's decoding and reply on the rings
// (serve) against go-fuse's transport-neutral fuse.ProtocolServer given the
// same ring buffers, the seam the rings could have been built on (doc.go).
func BenchmarkServe(b *testing.B) {
	writeIn := make([]byte, unsafe.Sizeof(fuse.WriteIn{})-unsafe.Sizeof(fuse.InHeader{}))
	(*fuse.WriteIn)(unsafe.Add(unsafe.Pointer(&writeIn[0]), -inHeaderSize)).Size = 4096
	for _, rq := range []struct {
		name string
		op   uint32
		opIn []byte // the opcode's header, as the kernel writes it to op_in
		data []byte // the payload
	}{
		{"getattr", opGetattr, make([]byte, unsafe.Sizeof(fuse.GetAttrIn{})-unsafe.Sizeof(fuse.InHeader{})), nil},
		{"lookup", opLookup, nil, []byte("rollout.jsonl\x00")},
		{"write4k", opWrite, writeIn, make([]byte, 4096)},
	} {
		mem := make([]byte, 4096+1<<20)
		e := &entry{hdr: mem[:hdrSize], payload: mem[4096:]}
		request := func() {
			h := (*fuse.InHeader)(unsafe.Pointer(&e.hdr[hdrInOut]))
			*h = fuse.InHeader{Length: uint32(inHeaderSize + len(rq.opIn) + len(rq.data)), Opcode: rq.op, NodeId: 1, Unique: 7}
			copy(e.hdr[hdrOpIn:], rq.opIn)
			copy(e.payload, rq.data)
		}
		b.Run(rq.name+"/rings", func(b *testing.B) {
			s := &Server{fs: answerFS{fuse.NewDefaultRawFileSystem()}, log: b.Logf}
			b.ReportAllocs()
			for b.Loop() {
				request()
				// As complete does with what the kernel wrote.
				copy(e.in[:inHeaderSize], e.hdr[hdrInOut:])
				copy(e.in[inHeaderSize:], e.hdr[hdrOpIn:hdrOpIn+128])
				s.serve(e, uint32(len(rq.data)), true)
			}
			if oh := (*fuse.OutHeader)(unsafe.Pointer(&e.hdr[hdrInOut])); oh.Status != 0 {
				b.Fatalf("status %d", oh.Status)
			}
		})
		b.Run(rq.name+"/protocolserver", func(b *testing.B) {
			ps := fuse.NewProtocolServer(answerFS{fuse.NewDefaultRawFileSystem()}, &fuse.MountOptions{MaxWrite: 1 << 20})
			b.ReportAllocs()
			for b.Loop() {
				request()
				in := [][]byte{e.hdr[hdrInOut : hdrInOut+inHeaderSize], e.hdr[hdrOpIn : hdrOpIn+len(rq.opIn)], e.payload[:len(rq.data)]}
				out := [][]byte{e.hdr[hdrInOut : hdrInOut+outHeaderSize], e.payload}
				if _, st := ps.HandleRequest(in, out); !st.Ok() {
					b.Fatal(st)
				}
			}
			if oh := (*fuse.OutHeader)(unsafe.Pointer(&e.hdr[hdrInOut])); oh.Status != 0 {
				b.Fatalf("status %d", oh.Status)
			}
		})
	}
}
