package uring

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// ringPool is the process's ring threads, shared by every mount served
// over io_uring: a ringSet started with the first mount and stopped once
// the last one has ended. A set one of whose rings failed takes no new
// mount: the next mount starts a set of its own, and the failed set ends
// with the last of its mounts (which the failure aborted).
type ringPool struct {
	mu  sync.Mutex
	cur *ringSet // GUARDED_BY(mu); nil while no mount uses it
}

// ringSet is one generation of ring threads, one a CPU.
type ringSet struct {
	rings []*ring
	users int // GUARDED_BY(pool.mu): servers not finished
	// mounts is users, for the ring threads to read without the lock.
	mounts atomic.Int32
	// failed is set by a ring of the set that failed.
	failed atomic.Bool
	wg     sync.WaitGroup
}

var pool ringPool

// acquire returns the current set, starting one for the first user or
// after a failure.
func (p *ringPool) acquire(log func(string, ...any)) (*ringSet, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur == nil || p.cur.failed.Load() {
		set, err := startRings(log)
		if err != nil {
			return nil, err
		}
		p.cur = set
	}
	set := p.cur
	set.users++
	set.mounts.Store(int32(set.users))
	return set, nil
}

// release gives set back; its last user stops its rings and waits for
// their threads to end.
func (p *ringPool) release(set *ringSet) {
	p.mu.Lock()
	defer p.mu.Unlock()
	set.users--
	set.mounts.Store(int32(set.users))
	if set.users > 0 {
		return
	}
	for _, r := range set.rings {
		r.post(func(m *ringMail) { m.stop = true })
	}
	set.wg.Wait()
	if p.cur == set {
		p.cur = nil
	}
}

// startRings builds a ring for each CPU (for several CPUs past
// maxThreads) and starts its thread.
func startRings(log func(string, ...any)) (*ringSet, error) {
	ncpu, err := possibleCPUs()
	if err != nil {
		return nil, err
	}
	threads := min(ncpu, maxThreads)
	set := &ringSet{}
	fail := func(err error) (*ringSet, error) {
		for _, r := range set.rings {
			r.free()
		}
		return nil, err
	}
	for t := range threads {
		r := &ring{idx: t, cpu: -1, evfd: -1, log: log, set: set}
		if threads == ncpu {
			r.cpu = t
		}
		set.rings = append(set.rings, r)
		for q := t; q < ncpu; q += threads {
			r.queues = append(r.queues, q)
		}
		if r.io, err = newIORing(ringSQ, ringCQ); err != nil {
			return fail(err)
		}
		if r.evfd, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
			return fail(fmt.Errorf("eventfd: %w", err))
		}
	}
	for _, r := range set.rings {
		set.wg.Add(1)
		go func() {
			defer set.wg.Done()
			r.run()
		}()
	}
	return set, nil
}

// The size of a ring's submission and completion queues. A full
// submission queue is submitted before the next entry is taken. A slot
// has at most one command out, so the completion queue cannot overflow
// while a ring has fewer slots than ringCQ. A mount takes queueDepth
// slots for each queue the ring serves, and one more on the ring that
// reads its /dev/fuse: some 3,200 mounts with a queue a ring, some 1,000
// on a host of 64 CPUs (four queues a ring, maxThreads). Past that the
// kernel keeps the completions that do not fit until the ring reaps
// (IORING_FEAT_NODROP).
const (
	ringSQ = 256
	ringCQ = 16384
)

// ring is one ring thread's state: its io_uring, the commands it has out
// for every mount (slots), and its mail.
type ring struct {
	set    *ringSet
	idx    int
	cpu    int   // the CPU the thread is pinned to, or -1
	queues []int // the kernel's queues it serves
	io     *ioRing
	log    func(msg string, args ...any)
	evfd   int // closed under mu (free), written under mu (post)
	evb    [8]byte

	// slots are the entries and /dev/fuse reads with a command out, by
	// user data - 1; unused are the slots free. They, live and the rest
	// below belong to the ring thread.
	slots  []*entry
	unused []int
	live   int
	// adding are the servers whose REGISTERs were queued and not yet
	// submitted and reaped; regRetries counts the REGISTERs sent again
	// since registered's round began.
	adding     []*Server
	regRetries int
	stop       bool
	// batch: the thread is pinned and may wait as SCHED_BATCH
	// (sched_linux.go); policy is the one it has, nice its nice value;
	// handedOff counts its requests out with goroutines, moved says
	// whether its last request moved data.
	batch     bool
	policy    uint32
	nice      int32
	handedOff int
	moved     bool

	mu    sync.Mutex
	mail  ringMail // GUARDED_BY(mu)
	awake bool     // GUARDED_BY(mu): the eventfd was written since the last read
}

// ringMail is what other goroutines hand a ring thread.
type ringMail struct {
	done  []*entry  // entries a goroutine served, to commit
	adds  []*Server // mounts whose entries to register
	reads []*Server // mounts whose /dev/fuse to read
	stop  bool      // no mount uses the ring: end the thread
	// onRing run on the ring thread, with its state at hand (a test
	// breaks the ring's io_uring through it).
	onRing []func()
}

const eventUserData = ^uint64(0)

// post changes the ring's mail under its lock and wakes the thread.
func (r *ring) post(f func(*ringMail)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.mail)
	if !r.awake {
		r.awake = true
		one := [8]byte{1}
		_, _ = unix.Write(r.evfd, one[:])
	}
}

// emptyBox takes the ring's mail and unsets awake, so that the next post
// writes the eventfd again.
func (r *ring) emptyBox() ringMail {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.mail
	r.mail, r.awake = ringMail{}, false
	return m
}

func (r *ring) free() {
	if r.io != nil {
		r.io.close()
		r.io = nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.evfd >= 0 {
		unix.Close(r.evfd)
		r.evfd = -1
	}
}

func (r *ring) run() {
	// The thread is never unlocked: it ends with the goroutine, pinned
	// and with its scheduling policy changed, rather than go back to the
	// runtime so.
	runtime.LockOSThread()
	if r.cpu >= 0 {
		var set unix.CPUSet
		set.Set(r.cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			// A cpuset without this CPU: serve unpinned.
			r.log("fuse ring thread not pinned", "cpu", r.cpu, "err", err)
		} else {
			r.batch = r.startBatch()
		}
	}
	r.armEvent()
	for !r.stop || r.live > 0 {
		r.settle()
		err := r.io.enter(true)
		if errors.Is(err, syscall.EBUSY) {
			err = nil // completions wait to be reaped: reaping makes room
		}
		if err == nil {
			r.io.reap(r.complete)
			err = r.registered()
		}
		if err == nil {
			err = r.io.err // a submission failed (sqe) or the mail went quiet
		}
		if err != nil {
			r.fail(err)
			return
		}
	}
	r.free()
}

// fail ends a ring whose io_uring failed. The kernel queues each mount's
// requests from this ring's CPUs on this ring's entries alone, so they
// would wait for ever: every mount the ring served is aborted (its
// processes get ENOTCONN, and it can be mounted again), and the set takes
// no new mount. The mounts keep their buffers, which the kernel may still
// write into.
func (r *ring) fail(err error) {
	r.log("fuse ring stopped; aborting the connections it served", "err", err)
	r.set.failed.Store(true)
	hit := make(map[*Server]bool)
	for _, e := range r.slots {
		if e != nil {
			hit[e.srv] = true
			e.srv.leak.Store(true)
			e.srv.endOne()
		}
	}
	// A mount registering when the ring failed is not one the kernel
	// refused: the other rings register its queues, the kernel holds its
	// requests until every queue is, and this one never will be. Its
	// start fails (errRingFailed), and it is aborted (hit, or below).
	failed := fmt.Errorf("%w: %v", errRingFailed, err)
	for _, s := range r.adding {
		s.refused(failed)
		s.regWG.Done()
	}
	for s := range hit {
		go s.abort(err)
	}
	r.slots, r.adding = nil, nil
	// The kernel cancels what the io_uring had out, the eventfd read too.
	r.io.close()
	r.io = nil
	defer r.free()
	for {
		// Mail still comes (deferred replies, mounts): answer what waits.
		m := r.emptyBox()
		for _, s := range m.adds {
			s.refused(failed)
			s.regWG.Done()
			for range s.ents[r.idx] {
				s.endOne() // never handed to the kernel
			}
			go s.abort(err)
		}
		for _, s := range m.reads {
			s.endOne()
		}
		// m.done: entries the slots above ended already.
		if m.stop {
			return
		}
		var b [8]byte
		_, _ = unix.Read(r.evfd, b[:])
	}
}

// registered submits the REGISTERs queued for new mounts and reaps what
// the kernel answered at once (a refusal), then tells the mounts. A
// REGISTER answered EAGAIN went back into the submission queue
// (complete): its mount is told once a round retries none, or after
// registerWait, when the kernel answers the retries later like any
// command.
func (r *ring) registered() error {
	for len(r.adding) > 0 {
		batch := r.adding
		r.adding = nil
		deadline := time.Now().Add(registerWait)
		for round := 0; round == 0 || r.regRetries > 0 && time.Now().Before(deadline); round++ {
			if round > 0 {
				time.Sleep(time.Millisecond) // EAGAIN comes back at once
			}
			r.regRetries = 0
			for r.io.pending > 0 {
				if err := r.io.enter(false); err != nil {
					r.adding = append(batch, r.adding...)
					return err
				}
			}
			r.io.reap(r.complete)
		}
		for _, s := range batch {
			s.regWG.Done()
		}
	}
	return nil
}

// registerWait bounds how long registered retries REGISTERs the kernel
// answered EAGAIN (a connection whose INIT it has not finished).
const registerWait = time.Second

// place gives e a slot.
func (r *ring) place(e *entry) {
	if n := len(r.unused); n > 0 {
		e.slot = r.unused[n-1]
		r.unused = r.unused[:n-1]
		r.slots[e.slot] = e
	} else {
		e.slot = len(r.slots)
		r.slots = append(r.slots, e)
	}
	r.live++
}

// end frees e's slot: the kernel holds no command of it any more.
func (r *ring) end(e *entry) {
	r.slots[e.slot] = nil
	r.unused = append(r.unused, e.slot)
	r.live--
	e.srv.endOne()
}

func (r *ring) submitCmd(e *entry, cmd uint32) {
	e.lastCmd = cmd
	s := r.io.sqe()
	s[0] = ioringOpURingCmd
	*(*int32)(unsafe.Pointer(&s[4])) = int32(e.srv.devFD)
	*(*uint32)(unsafe.Pointer(&s[8])) = cmd
	if cmd == fuseURingCmdRegister {
		iov := (*[2]unix.Iovec)(unsafe.Pointer(&e.hdr[hdrSize]))
		iov[0] = unix.Iovec{Base: &e.hdr[0], Len: hdrSize}
		iov[1] = unix.Iovec{Base: &e.payload[0], Len: uint64(len(e.payload))}
		*(*uint64)(unsafe.Pointer(&s[16])) = uint64(uintptr(unsafe.Pointer(iov)))
		*(*uint32)(unsafe.Pointer(&s[24])) = 2
	}
	*(*uint64)(unsafe.Pointer(&s[32])) = uint64(e.slot) + 1
	// struct fuse_uring_cmd_req in the command area at byte 48.
	*(*uint64)(unsafe.Pointer(&s[56])) = e.commitID
	*(*uint16)(unsafe.Pointer(&s[64])) = e.qid
}

// armEvent reads the eventfd through the ring, so that mail wakes the
// ring thread.
func (r *ring) armEvent() {
	s := r.io.sqe()
	s[0] = ioringOpRead
	*(*int32)(unsafe.Pointer(&s[4])) = int32(r.evfd)
	*(*uint64)(unsafe.Pointer(&s[16])) = uint64(uintptr(unsafe.Pointer(&r.evb[0])))
	*(*uint32)(unsafe.Pointer(&s[24])) = 8
	*(*uint64)(unsafe.Pointer(&s[32])) = eventUserData
}

// armRead reads the mount's /dev/fuse through the ring: the kernel polls
// the descriptor and reads once a request is there, so no thread waits
// for a mount's FORGET.
func (r *ring) armRead(e *entry) {
	s := r.io.sqe()
	s[0] = ioringOpRead
	*(*int32)(unsafe.Pointer(&s[4])) = int32(e.srv.devFD)
	*(*uint64)(unsafe.Pointer(&s[16])) = uint64(uintptr(unsafe.Pointer(&e.payload[0])))
	*(*uint32)(unsafe.Pointer(&s[24])) = uint32(len(e.payload))
	*(*uint64)(unsafe.Pointer(&s[32])) = uint64(e.slot) + 1
}

// takeMail takes the ring's mail: entries served by goroutines are
// committed, new mounts' entries registered, new mounts' /dev/fuse read.
func (r *ring) takeMail(res int32) {
	if res < 0 && res != -int32(syscall.EINTR) && res != -int32(syscall.EAGAIN) {
		// Only a closed eventfd fails, and it closes after the loop. A
		// ring that no longer hears its mail would never commit a
		// deferred reply nor stop: it fails instead.
		if r.io.err == nil {
			r.io.err = fmt.Errorf("eventfd read: %w", syscall.Errno(-res))
		}
		return
	}
	m := r.emptyBox()
	for _, e := range m.done {
		r.commit(e)
	}
	r.handedOff -= len(m.done)
	for _, s := range m.adds {
		for _, e := range s.ents[r.idx] {
			r.place(e)
			r.submitCmd(e, fuseURingCmdRegister)
		}
		r.adding = append(r.adding, s)
	}
	for _, s := range m.reads {
		r.place(s.reader)
		r.armRead(s.reader)
	}
	r.stop = r.stop || m.stop
	for _, f := range m.onRing {
		f()
	}
	r.armEvent()
}

func (r *ring) complete(ud uint64, res int32) {
	if ud == eventUserData {
		r.takeMail(res)
		return
	}
	i := int(ud - 1)
	if i < 0 || i >= len(r.slots) || r.slots[i] == nil {
		r.log("fuse ring: completion for no entry", "user_data", ud)
		return
	}
	e := r.slots[i]
	if e.reader {
		r.readDone(e, res)
		return
	}
	if res == -int32(syscall.EINTR) || res == -int32(syscall.EAGAIN) {
		// Not taken: send the command again.
		if e.lastCmd == fuseURingCmdRegister {
			r.regRetries++
		}
		r.submitCmd(e, e.lastCmd)
		return
	}
	if res < 0 {
		// ENOTCONN and ECONNABORTED: the connection is gone.
		if e.lastCmd == fuseURingCmdRegister {
			e.srv.refused(fmt.Errorf("FUSE_IO_URING_CMD_REGISTER: %w", syscall.Errno(-res)))
		} else if res != -int32(syscall.ENOTCONN) && res != -int32(syscall.ECONNABORTED) {
			e.srv.log("fuse ring entry failed", "err", syscall.Errno(-res))
		}
		r.end(e)
		return
	}
	r.request(e)
}

// request serves the request the kernel put in e.
func (r *ring) request(e *entry) {
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
	if !deferred(e, r.set.mounts.Load() > 1) && e.srv.serve(e, n, true) {
		r.commit(e)
		return
	}
	// At most one goroutine an entry: the kernel sends an entry no other
	// request until its reply is committed. The thread waits as
	// SCHED_NORMAL from now on, before the goroutine runs.
	r.handedOff++
	r.settle()
	go func() {
		e.srv.serve(e, n, false)
		r.post(func(m *ringMail) { m.done = append(m.done, e) })
	}()
}

func (r *ring) commit(e *entry) {
	e.srv.served[r.idx].n.Add(1)
	kernelReply()
	r.submitCmd(e, fuseURingCmdCommitAndFetch)
}

// readDone handles a read of a mount's /dev/fuse: the kernel sends there
// FORGET, BATCH_FORGET and INTERRUPT, and nothing else once the rings
// serve the connection. It ends the reader when the connection has.
func (r *ring) readDone(e *entry, res int32) {
	switch {
	case res == -int32(syscall.EAGAIN) || res == -int32(syscall.EINTR):
	case res < 0:
		// ENODEV (unmounted) or ECONNABORTED (aborted).
		if res != -int32(syscall.ENODEV) && res != -int32(syscall.ECONNABORTED) {
			e.srv.log("fuse ring: /dev/fuse read failed", "err", syscall.Errno(-res))
		}
		r.end(e)
		return
	default:
		e.srv.devRequest(e.payload[:res])
	}
	r.armRead(e)
}

// FUSE opcodes the kernel sends through /dev/fuse alone.
const (
	opForget      = 2
	opInterrupt   = 36
	opBatchForget = 42
)

// devRequest serves a request read from /dev/fuse: FORGETs go to the
// file system; an INTERRUPT is answered ENOSYS, as no handler of the rings
// can be interrupted (see handlers; the kernel looks the request up among
// those it sent through /dev/fuse, finds none and drops the answer with
// ENOENT); anything else, which the kernel sends through the rings,
// ENOSYS as well.
func (s *Server) devRequest(b []byte) {
	defer func() {
		// A FORGET the file system panics on is dropped, as go-fuse
		// drops it, rather than ending the process from the ring thread.
		if p := recover(); p != nil {
			s.log("fuse: FORGET panicked", "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
		}
	}()
	if len(b) < inHeaderSize {
		s.log("fuse: short request on /dev/fuse", "len", len(b))
		return
	}
	h := (*fuse.InHeader)(unsafe.Pointer(&b[0]))
	switch h.Opcode {
	case opForget:
		if len(b) >= inHeaderSize+8 && s.forget && h.NodeId != pollHackInode {
			s.fs.Forget(h.NodeId, *(*uint64)(unsafe.Pointer(&b[inHeaderSize])))
		}
		return
	case opBatchForget:
		if len(b) < inHeaderSize+8 || !s.forget {
			return
		}
		const one = 16 // struct fuse_forget_one
		count := min(int(*(*uint32)(unsafe.Pointer(&b[inHeaderSize]))), (len(b)-inHeaderSize-8)/one)
		for i := range count {
			f := b[inHeaderSize+8+i*one:]
			node := *(*uint64)(unsafe.Pointer(&f[0]))
			if node != pollHackInode {
				s.fs.Forget(node, *(*uint64)(unsafe.Pointer(&f[8])))
			}
		}
		return
	case opInterrupt:
	default:
		s.log("fuse: unexpected request on /dev/fuse", "op", h.Opcode, "unique", h.Unique)
	}
	if s.debug {
		s.log("fuse request on /dev/fuse answered ENOSYS", "op", h.Opcode, "unique", h.Unique)
	}
	out := fuse.OutHeader{Length: uint32(outHeaderSize), Status: -int32(syscall.ENOSYS), Unique: h.Unique}
	if _, err := unix.Write(s.devFD, (*[outHeaderSize]byte)(unsafe.Pointer(&out))[:]); err != nil && err != syscall.ENOENT {
		s.log("fuse: reply on /dev/fuse", "op", h.Opcode, "err", err)
	}
}
