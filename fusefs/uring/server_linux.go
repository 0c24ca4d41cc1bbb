package uring

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
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
	// maxThreads bounds the ring threads of one mount; on a host with
	// more CPUs each thread serves several queues, unpinned.
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

// Server serves one mount's requests from its rings.
type Server struct {
	fs    fuse.RawFileSystem
	local fuse.RawFileSystem // fs's local view (LocalServer); else nil
	devFD int
	log   func(msg string, args ...any)
	debug bool   // log every request, as go-fuse's Debug does
	dir   string // the mountpoint, for Unmount
	rings []*ring
	wg    sync.WaitGroup
	// active is set once every entry is registered: the kernel sends the
	// connection's requests through the rings.
	active atomic.Bool

	unmountMu sync.Mutex
	unmounted bool // GUARDED_BY(unmountMu)
}

// ring is one ring thread's state: its io_uring, the entries it
// registered (queueDepth for each queue it serves) and the entries that
// goroutines finished serving.
type ring struct {
	srv  *Server
	cpu  int // the CPU the thread is pinned to, or -1
	io   *ioRing
	ents []*entry
	evfd int // closed under mu (free), written under mu (deferred replies)
	evb  [8]byte
	live int
	// batch: the thread is pinned and may wait as SCHED_BATCH
	// (sched_linux.go); policy is the one it has, nice its nice value;
	// handedOff counts its requests out with goroutines, moved says
	// whether its last request moved data. They belong to the ring
	// thread.
	batch     bool
	policy    uint32
	nice      int32
	handedOff int
	moved     bool
	// served counts the requests this ring answered: one counter a ring,
	// so that rings on different CPUs share no cache line per request.
	served atomic.Int64
	// backlog holds completions reaped while registering.
	backlog []cqe

	mu    sync.Mutex
	done  []*entry
	awake bool
}

// entry is one ring entry: the kernel's request header and payload
// buffers, outside the Go heap.
type entry struct {
	idx      int // in r.ents; the completion's user data is idx+1
	qid      uint16
	lastCmd  uint32
	mem      []byte
	hdr      []byte
	payload  []byte
	commitID uint64
	// in is the request as go-fuse lays it out: the fuse_in_header followed
	// by the opcode's own header.
	in [inHeaderSize + 128]byte
}

const eventUserData = ^uint64(0)

// newServer prepares the rings, before the mount: a kernel that has
// agreed to io_uring holds every request until all queues are registered,
// so no part may fail after INIT.
func newServer(fs fuse.RawFileSystem, maxWrite int, log func(string, ...any)) (*Server, error) {
	ncpu, err := possibleCPUs()
	if err != nil {
		return nil, err
	}
	// The kernel's buffer for one request: max(8 KiB, max_write, max_pages
	// pages), with max_pages rounded up from max_write.
	page := os.Getpagesize()
	payload := max(8192, (maxWrite+page-1)/page*page)
	s := &Server{fs: fs, log: log, devFD: -1}
	if ls, ok := fs.(LocalServer); ok {
		s.local = ls.Local()
	}
	threads := min(ncpu, maxThreads)
	for t := range threads {
		r := &ring{srv: s, cpu: -1, evfd: -1}
		if threads == ncpu {
			r.cpu = t
		}
		s.rings = append(s.rings, r)
		for q := t; q < ncpu; q += threads {
			for range queueDepth {
				mem, err := unix.Mmap(-1, 0, page+payload, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
				if err != nil {
					s.close()
					return nil, fmt.Errorf("ring buffer: %w", err)
				}
				r.ents = append(r.ents, &entry{idx: len(r.ents), qid: uint16(q), mem: mem, hdr: mem[:hdrSize], payload: mem[page:]})
			}
		}
		if r.io, err = newIORing(uint32(len(r.ents) + 1)); err != nil {
			s.close()
			return nil, err
		}
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("eventfd: %w", err)
		}
		r.evfd = fd
	}
	return s, nil
}

// close frees the rings of a server that never started.
func (s *Server) close() {
	for _, r := range s.rings {
		r.free()
	}
}

func (r *ring) free() {
	if r.io != nil {
		r.io.close()
		r.io = nil
	}
	r.mu.Lock()
	if r.evfd >= 0 {
		unix.Close(r.evfd)
		r.evfd = -1
	}
	r.mu.Unlock()
	if r.live > 0 {
		// The ring stopped with entries the kernel may still write into
		// (an io_uring_enter failed): leave their memory mapped.
		return
	}
	for _, e := range r.ents {
		_ = unix.Munmap(e.mem)
	}
	r.ents = nil
}

// start starts the ring threads, which register the entries on devFD and
// serve them until the connection ends. It returns once every ring has
// registered its entries, with the first error that stopped one.
func (s *Server) start(devFD int) error {
	s.devFD = devFD
	ready := make(chan error, len(s.rings))
	for _, r := range s.rings {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			r.run(ready)
		}()
	}
	var first error
	for range s.rings {
		if err := <-ready; err != nil && first == nil {
			first = err
		}
	}
	s.active.Store(first == nil)
	return first
}

func (r *ring) run(ready chan<- error) {
	// The thread is never unlocked: it ends with the goroutine, pinned
	// and with its scheduling policy changed, rather than go back to the
	// runtime so.
	runtime.LockOSThread()
	defer r.free()
	if r.cpu >= 0 {
		var set unix.CPUSet
		set.Set(r.cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			// A cpuset without this CPU: serve unpinned.
			r.srv.log("fuse ring thread not pinned", "cpu", r.cpu, "err", err)
		} else {
			r.batch = r.startBatch()
		}
	}
	if err := r.registerDev(); err != nil {
		ready <- err
		return
	}
	n, err := r.register()
	ready <- err
	if n == 0 {
		return
	}
	// Entries the kernel took stay in use until the connection ends, even
	// if a later one was refused: the kernel may still write into them.
	r.live = n
	r.armEvent()
	for _, c := range r.backlog {
		r.complete(c.userData, c.res)
	}
	r.backlog = nil
	for r.live > 0 {
		r.settle()
		if err := r.io.enter(true); err != nil {
			r.srv.log("fuse ring stopped", "err", err)
			return
		}
		r.io.reap(r.complete)
	}
}

// registerDev gives the ring its own reference to the /dev/fuse
// descriptor: go-fuse closes its descriptor when the connection ends, and
// the number may be reused while the ring still has commands to send.
func (r *ring) registerDev() error {
	fds := []int32{int32(r.srv.devFD)}
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.io.fd), ioringRegisterFiles, uintptr(unsafe.Pointer(&fds[0])), 1, 0, 0); errno != 0 {
		return fmt.Errorf("io_uring_register files: %w", errno)
	}
	return nil
}

// register submits a REGISTER for every entry. The kernel refuses one
// with EAGAIN until it has processed the INIT reply, and answers a good
// one only with a request; requests that arrive meanwhile wait in
// r.backlog. It returns how many entries (the first ones) the kernel took.
func (r *ring) register() (int, error) {
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < len(r.ents); {
		r.submitCmd(r.ents[i], fuseURingCmdRegister)
		for r.io.pending > 0 {
			if err := r.io.enter(false); err != nil {
				return i, err
			}
		}
		again := false
		var failed error
		r.io.reap(func(ud uint64, res int32) {
			switch {
			case ud == uint64(i)+1 && res == -int32(syscall.EAGAIN):
				again = true
			case ud == uint64(i)+1 && res < 0:
				failed = fmt.Errorf("FUSE_IO_URING_CMD_REGISTER: %w", syscall.Errno(-res))
			default:
				// A request for an entry registered before, or its end.
				r.backlog = append(r.backlog, cqe{ud, res})
			}
		})
		if failed != nil {
			return i, failed
		}
		if !again {
			i++
			continue
		}
		if time.Now().After(deadline) {
			return i, fmt.Errorf("FUSE_IO_URING_CMD_REGISTER: %w (the connection never finished INIT)", syscall.EAGAIN)
		}
		time.Sleep(time.Millisecond)
	}
	return len(r.ents), nil
}

func (r *ring) submitCmd(e *entry, cmd uint32) {
	e.lastCmd = cmd
	s := r.io.sqe()
	s[0] = ioringOpURingCmd
	// The descriptor is the ring's registered file 0 (registerDev).
	s[1] = iosqeFixedFile
	*(*uint32)(unsafe.Pointer(&s[8])) = cmd
	if cmd == fuseURingCmdRegister {
		iov := (*[2]unix.Iovec)(unsafe.Pointer(&e.mem[512]))
		iov[0] = unix.Iovec{Base: &e.hdr[0], Len: uint64(len(e.hdr))}
		iov[1] = unix.Iovec{Base: &e.payload[0], Len: uint64(len(e.payload))}
		*(*uint64)(unsafe.Pointer(&s[16])) = uint64(uintptr(unsafe.Pointer(iov)))
		*(*uint32)(unsafe.Pointer(&s[24])) = 2
	}
	*(*uint64)(unsafe.Pointer(&s[32])) = uint64(e.idx) + 1
	// struct fuse_uring_cmd_req in the command area at byte 48.
	*(*uint64)(unsafe.Pointer(&s[56])) = e.commitID
	*(*uint16)(unsafe.Pointer(&s[64])) = e.qid
}

// armEvent reads the eventfd through the ring, so that a goroutine
// finishing a request wakes the ring thread.
func (r *ring) armEvent() {
	s := r.io.sqe()
	s[0] = ioringOpRead
	*(*int32)(unsafe.Pointer(&s[4])) = int32(r.evfd)
	*(*uint64)(unsafe.Pointer(&s[16])) = uint64(uintptr(unsafe.Pointer(&r.evb[0])))
	*(*uint32)(unsafe.Pointer(&s[24])) = 8
	*(*uint64)(unsafe.Pointer(&s[32])) = eventUserData
}

func (r *ring) complete(ud uint64, res int32) {
	if ud == eventUserData {
		if res < 0 && res != -int32(syscall.EINTR) && res != -int32(syscall.EAGAIN) {
			// Only a closed eventfd fails, and it closes after the loop.
			r.srv.log("fuse ring: eventfd read failed", "err", syscall.Errno(-res))
			return
		}
		r.mu.Lock()
		done := r.done
		r.done, r.awake = nil, false
		r.mu.Unlock()
		for _, e := range done {
			r.commit(e)
		}
		r.handedOff -= len(done)
		r.armEvent()
		return
	}
	i := int(ud - 1)
	if i < 0 || i >= len(r.ents) {
		r.srv.log("fuse ring: completion for no entry", "user_data", ud)
		return
	}
	e := r.ents[i]
	if res == -int32(syscall.EINTR) || res == -int32(syscall.EAGAIN) {
		// Not taken: send the command again.
		r.submitCmd(e, e.lastCmd)
		return
	}
	if res < 0 {
		// ENOTCONN and ECONNABORTED: the connection is gone.
		r.live--
		if res != -int32(syscall.ENOTCONN) && res != -int32(syscall.ECONNABORTED) {
			r.srv.log("fuse ring entry failed", "err", syscall.Errno(-res))
		}
		return
	}
	kernelRequest()
	e.commitID = *(*uint64)(unsafe.Pointer(&e.hdr[hdrEntInOut+8]))
	n := *(*uint32)(unsafe.Pointer(&e.hdr[hdrEntInOut+16]))
	copy(e.in[:inHeaderSize], e.hdr[hdrInOut:])
	copy(e.in[inHeaderSize:], e.hdr[hdrOpIn:hdrOpIn+128])
	// The kernel writes only the opcode's header; the rest of op_in must
	// read as zero for the next request (RENAME's header is shorter than
	// RENAME2's, for one).
	clear(e.hdr[hdrOpIn : hdrOpIn+128])
	r.took(e)
	if !deferred(e) && r.srv.serve(e, n, true) {
		r.commit(e)
		return
	}
	// At most one goroutine an entry: the kernel sends an entry no other
	// request until its reply is committed.
	r.handedOff++
	go func() {
		r.srv.serve(e, n, false)
		r.mu.Lock()
		defer r.mu.Unlock()
		r.done = append(r.done, e)
		if !r.awake {
			// Under mu: free closes the eventfd under mu too.
			r.awake = true
			one := [8]byte{1}
			_, _ = unix.Write(r.evfd, one[:])
		}
	}()
}

func (r *ring) commit(e *entry) {
	r.served.Add(1)
	kernelReply()
	r.submitCmd(e, fuseURingCmdCommitAndFetch)
}

// deferred tells which requests go to a goroutine rather than being
// served on the ring thread: large writes, and requests that may wait for
// long. Everything else is inline, READ and FSYNC included: their callers
// wait for them anyway, and handing one to a goroutine and back costs two
// cross-CPU wakeups (measured: 4 KiB random write + fsync, 12 MB/s with
// FSYNC handed off, 15 MB/s inline; git status on Go's tree 1.5× native
// with READ handed off, 1.03× inline; sequential read the same). A
// request that needs a remote goes to a goroutine all the same (localOps).
func deferred(e *entry) bool {
	h := (*fuse.InHeader)(unsafe.Pointer(&e.in[0]))
	switch h.Opcode {
	case opSetlkw, opFallocate, opCopyFileRange:
		return true
	case opWrite:
		return (*fuse.WriteIn)(unsafe.Pointer(&e.in[0])).Size > inlineWrite
	}
	return false
}
