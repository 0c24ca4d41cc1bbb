package uring

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FUSE over io_uring ABI (include/uapi/linux/fuse.h).
const (
	fuseURingCmdRegister       = 1
	fuseURingCmdCommitAndFetch = 2
	// struct fuse_uring_req_header: in_out[128], op_in[128], ring_ent_in_out.
	hdrInOut      = 0
	hdrOpIn       = 128
	hdrEntInOut   = 256
	hdrSize       = 288
	inHeaderSize  = int(unsafe.Sizeof(fuse.InHeader{}))
	outHeaderSize = int(unsafe.Sizeof(fuse.OutHeader{}))
)

const (
	// queueDepth is the number of ring entries per queue: requests from one
	// CPU in flight at once. One is served inline; the rest wait, or are
	// served by goroutines (deferred).
	queueDepth = 4
	// maxThreads bounds the process's ring threads; on a host with more
	// CPUs each thread serves several queues, unpinned.
	maxThreads = 16
	// inlineWrite is the largest WRITE served on the ring thread.
	inlineWrite = 64 << 10
)

// possibleCPUs is the kernel's count of queues: one per possible CPU.
func possibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, err
	}
	return cpuCount(string(b))
}

// cpuCount is one more than the highest CPU of a kernel CPU list
// ("0-3,8-11"): the kernel numbers queues by CPU.
func cpuCount(b string) (int, error) {
	n := 0
	for _, part := range strings.Split(strings.TrimSpace(b), ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("cpu list %q: %w", b, err)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("cpu list %q: %w", b, err)
			}
		}
		if a < 0 || z < a || z >= 1<<16 {
			return 0, fmt.Errorf("cpu list %q: bad range %q", b, part)
		}
		n = max(n, z+1)
	}
	if n == 0 {
		return 0, fmt.Errorf("cpu list %q: empty", b)
	}
	return n, nil
}

// Server serves one mount's requests from the process's rings.
type Server struct {
	fs     fuse.RawFileSystem
	local  fuse.RawFileSystem // fs's local view (LocalServer); else nil
	devFD  int
	log    func(msg string, args ...any)
	debug  bool   // log every request, as go-fuse's Debug does
	forget bool   // pass FORGETs on (not go-fuse's RememberInodes)
	dir    string // the mountpoint, for Unmount
	// fuse is go-fuse's server of the connection: it answered INIT, and
	// serves /dev/fuse if the rings do not (fallback); else its Serve runs
	// only once the connection has ended, to close the descriptor.
	fuse     *fuse.Server
	fallback bool
	set      *ringSet
	rings    []*ring // set's
	// conn names the connection in fusectl (mountinfo), "" if unknown.
	conn string
	// mem holds every buffer of the mount, one mapping outside the Go
	// heap: the entries' headers, their payloads, and the /dev/fuse read
	// buffer. Unmapped once nothing of the kernel's refers to it.
	mem    []byte
	ents   [][]*entry // by ring: the entries of the queues it serves
	reader *entry     // the /dev/fuse read, on rings[readerRing]
	// readerRing is the ring that reads /dev/fuse for FORGET and
	// INTERRUPT.
	readerRing int
	// live counts the entries and the reader a ring still has a command
	// out for, and one for start while it runs: at zero the connection
	// has ended and the rings hold nothing of the mount's (finish).
	live atomic.Int32
	// served counts the requests the rings answered, one counter a ring,
	// so that rings on different CPUs share no cache line per request.
	served []paddedCount
	// active is set once every entry is registered: the kernel sends the
	// connection's requests through the rings.
	active atomic.Bool
	ended  chan struct{} // closed by finish
	// leak is set by a ring that failed with commands of the mount out:
	// the kernel may still write into mem, which stays mapped.
	leak atomic.Bool

	regWG  sync.WaitGroup // the rings' registration of the entries
	regMu  sync.Mutex
	regErr error // GUARDED_BY(regMu): the first REGISTER refused

	unmountMu sync.Mutex
	unmounted bool // GUARDED_BY(unmountMu)
}

// paddedCount is a counter on a cache line of its own.
type paddedCount struct {
	n atomic.Int64
	_ [56]byte
}

// entry is one ring entry, or the mount's /dev/fuse read (reader): the
// kernel's request header and payload buffers, in the Server's mem.
type entry struct {
	srv      *Server
	slot     int // in its ring's slots; the completion's user data is slot+1
	qid      uint16
	reader   bool
	lastCmd  uint32
	hdr      []byte // hdrSize bytes, then the REGISTER's iovecs
	payload  []byte
	commitID uint64
	// in is the request as go-fuse lays it out: the fuse_in_header followed
	// by the opcode's own header.
	in [inHeaderSize + 128]byte
}

// hdrStride is an entry's share of the header pages: its header and the
// two iovecs of its REGISTER.
const hdrStride = 512

// newServer prepares the mount's part of the rings, before the mount: a
// kernel that has agreed to io_uring holds every request until all queues
// are registered, so no part may fail after INIT.
func newServer(fs fuse.RawFileSystem, maxWrite int, log func(string, ...any)) (*Server, error) {
	set, err := pool.acquire(log)
	if err != nil {
		return nil, err
	}
	rings := set.rings
	s := &Server{fs: fs, log: log, devFD: -1, forget: true, set: set, rings: rings, ended: make(chan struct{})}
	if ls, ok := fs.(LocalServer); ok {
		s.local = ls.Local()
	}
	// The kernel's buffer for one request: max(8 KiB, max_write, max_pages
	// pages), with max_pages rounded up from max_write. A read of
	// /dev/fuse wants room for a WRITE's headers and max_write.
	page := os.Getpagesize()
	payload := max(8192, (maxWrite+page-1)/page*page)
	n := 0
	for _, r := range rings {
		n += len(r.queues) * queueDepth
	}
	hdrs := (n*hdrStride + page - 1) / page * page
	s.mem, err = unix.Mmap(-1, 0, hdrs+n*payload+payload+page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		pool.release(set)
		return nil, fmt.Errorf("ring buffers: %w", err)
	}
	i := 0
	s.ents = make([][]*entry, len(rings))
	for ri, r := range rings {
		for _, q := range r.queues {
			for range queueDepth {
				off := hdrs + i*payload
				s.ents[ri] = append(s.ents[ri], &entry{srv: s, qid: uint16(q), hdr: s.mem[i*hdrStride : (i+1)*hdrStride], payload: s.mem[off : off+payload]})
				i++
			}
		}
	}
	s.reader = &entry{srv: s, reader: true, payload: s.mem[hdrs+n*payload:]}
	s.served = make([]paddedCount, len(rings))
	mounts := mountSeq.Add(1)
	s.readerRing = int(mounts % uint64(len(rings)))
	return s, nil
}

// mountSeq spreads the mounts' /dev/fuse reads over the rings.
var mountSeq atomic.Uint64

// close frees a server that never started.
func (s *Server) close() {
	_ = unix.Munmap(s.mem)
	pool.release(s.set)
}

// start hands the entries to the rings, which register them on devFD,
// and returns once every ring has, with the first error the kernel gave.
// Then the rings serve the connection's requests and a ring reads
// /dev/fuse for the rest; after an error go-fuse serves /dev/fuse, where
// the kernel then sends every request, but for errRingFailed: a ring
// failed before it registered the mount's queue, and the connection,
// which the kernel would hold for ever, is aborted.
func (s *Server) start(devFD int) error {
	s.devFD = devFD
	n := 0
	for _, ents := range s.ents {
		n += len(ents)
	}
	s.live.Store(int32(n) + 1)
	s.regWG.Add(len(s.rings))
	for _, r := range s.rings {
		r.post(func(m *ringMail) { m.adds = append(m.adds, s) })
	}
	s.regWG.Wait()
	s.regMu.Lock()
	err := s.regErr
	s.regMu.Unlock()
	if err == nil {
		// The ring's read must never wait: a request the poll saw may be
		// gone by the read (an INTERRUPT whose request ended).
		if nerr := unix.SetNonblock(devFD, true); nerr != nil {
			err = fmt.Errorf("/dev/fuse: %w", nerr)
		}
	}
	switch {
	case errors.Is(err, errRingFailed):
		// The connection is aborted: its commands come back, and
		// finish runs go-fuse's Serve to close it.
	case err != nil:
		s.fallback = true
		go s.fuse.Serve()
	default:
		s.active.Store(true)
		s.live.Add(1)
		s.rings[s.readerRing].post(func(m *ringMail) { m.reads = append(m.reads, s) })
	}
	s.endOne()
	return err
}

// errRingFailed: a mount's registration did not finish because a ring
// failed (ring.fail), which aborts the connection.
var errRingFailed = errors.New("fuse ring failed while the mount registered")

// refused records a REGISTER the kernel refused, or one a failed ring
// never made (errRingFailed).
func (s *Server) refused(err error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.regErr == nil {
		s.regErr = err
	}
}

// endOne notes that a ring holds one command of the mount's fewer.
func (s *Server) endOne() {
	if s.live.Add(-1) == 0 {
		go s.finish()
	}
}

// finish runs once the connection has ended and no ring holds anything
// of the mount's: go-fuse's Serve reads the end of the connection, closes
// the descriptor and tells the file system; the buffers go.
func (s *Server) finish() {
	if !s.fallback {
		go s.fuse.Serve()
	}
	if !s.leak.Load() {
		_ = unix.Munmap(s.mem)
	}
	pool.release(s.set)
	close(s.ended)
}

// deferred tells which requests go to a goroutine rather than being
// served on the ring thread: large writes, and requests that may wait for
// long. Everything else is inline, READ included: its caller waits for it
// anyway, and handing one to a goroutine and back costs two cross-CPU
// wakeups (git status on Go's tree 1.5× native with READ handed off,
// 1.03× inline; sequential read the same). FSYNC and FSYNCDIR, which wait
// for the disk, are inline while the ring serves one mount (4 KiB random
// write + fsync: 12 MB/s handed off, 15 MB/s inline) and handed off when
// it serves several (shared): the ring serves the CPU's requests of every
// mount one at a time, and no mount's flush should hold up another's
// requests. A request that needs a remote goes to a goroutine all the
// same (localOps).
func deferred(e *entry, shared bool) bool {
	h := (*fuse.InHeader)(unsafe.Pointer(&e.in[0]))
	switch h.Opcode {
	case opSetlkw, opFallocate, opCopyFileRange:
		return true
	case opFsync, opFsyncdir:
		return shared
	case opWrite:
		return (*fuse.WriteIn)(unsafe.Pointer(&e.in[0])).Size > inlineWrite
	}
	return false
}
