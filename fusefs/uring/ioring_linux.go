package uring

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// io_uring ABI (include/uapi/linux/io_uring.h).
const (
	ioringSetupCQSize    = 1 << 3
	ioringSetupSQE128    = 1 << 10
	ioringEnterGetEvents = 1 << 0
	ioringFeatSingleMmap = 1 << 0
	ioringOpRead         = 22
	ioringOpURingCmd     = 46
	ioringOffSQRing      = 0
	ioringOffCQRing      = 0x8000000
	ioringOffSQEs        = 0x10000000
	sqeSize              = 128 // IORING_SETUP_SQE128: the 80-byte command area
	cqeSize              = 16
)

// ioRing is one io_uring with 128-byte SQEs, used by one thread.
type ioRing struct {
	fd      int
	ringMem []byte
	cqMem   []byte
	sqeMem  []byte
	sqHead  *uint32
	sqTail  *uint32
	sqMask  uint32
	sqN     uint32
	sqArray []uint32
	cqHead  *uint32
	cqTail  *uint32
	cqMask  uint32
	cqOff   uint32
	pending uint32 // SQEs queued since the last enter
	// err is the first submission that failed (sqe): the ring's thread
	// fails the ring (ring.fail) at its next turn. spare takes that
	// submission, which goes nowhere.
	err   error
	spare [sqeSize]byte
}

type ioSQRingOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type ioCQRingOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, Cqes, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

type ioURingParams struct {
	SqEntries, CqEntries, Flags, SqThreadCPU, SqThreadIdle, Features, WqFd uint32
	Resv                                                                   [3]uint32
	SqOff                                                                  ioSQRingOffsets
	CqOff                                                                  ioCQRingOffsets
}

func newIORing(entries, cqEntries uint32) (*ioRing, error) {
	p := ioURingParams{Flags: ioringSetupSQE128 | ioringSetupCQSize, CqEntries: cqEntries}
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r := &ioRing{fd: int(fd)}
	sqSize := int(p.SqOff.Array + p.SqEntries*4)
	cqSize := int(p.CqOff.Cqes + p.CqEntries*cqeSize)
	fail := func(err error) (*ioRing, error) {
		r.close()
		return nil, err
	}
	var err error
	if p.Features&ioringFeatSingleMmap != 0 {
		r.ringMem, err = unix.Mmap(r.fd, ioringOffSQRing, max(sqSize, cqSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		r.cqMem = r.ringMem
	} else {
		r.ringMem, err = unix.Mmap(r.fd, ioringOffSQRing, sqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		if err == nil {
			r.cqMem, err = unix.Mmap(r.fd, ioringOffCQRing, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
		}
	}
	if err != nil {
		return fail(fmt.Errorf("io_uring mmap: %w", err))
	}
	if r.sqeMem, err = unix.Mmap(r.fd, ioringOffSQEs, int(p.SqEntries)*sqeSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
		return fail(fmt.Errorf("io_uring mmap: %w", err))
	}
	u32 := func(mem []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&mem[off])) }
	r.sqHead, r.sqTail = u32(r.ringMem, p.SqOff.Head), u32(r.ringMem, p.SqOff.Tail)
	r.sqMask, r.sqN = *u32(r.ringMem, p.SqOff.RingMask), p.SqEntries
	r.sqArray = unsafe.Slice(u32(r.ringMem, p.SqOff.Array), p.SqEntries)
	r.cqHead, r.cqTail = u32(r.cqMem, p.CqOff.Head), u32(r.cqMem, p.CqOff.Tail)
	r.cqMask, r.cqOff = *u32(r.cqMem, p.CqOff.RingMask), p.CqOff.Cqes
	return r, nil
}

func (r *ioRing) close() {
	if r.sqeMem != nil {
		_ = unix.Munmap(r.sqeMem)
	}
	if r.cqMem != nil && unsafe.SliceData(r.cqMem) != unsafe.SliceData(r.ringMem) {
		_ = unix.Munmap(r.cqMem)
	}
	if r.ringMem != nil {
		_ = unix.Munmap(r.ringMem)
	}
	unix.Close(r.fd)
}

// sqe returns the next submission entry, zeroed. A full submission
// queue is submitted first; if that fails, the entry returned is queued
// nowhere and r.err says so (the ring is then failed, not the process).
func (r *ioRing) sqe() []byte {
	tail := *r.sqTail
	if tail-atomic.LoadUint32(r.sqHead) >= r.sqN {
		if err := r.enter(false); err != nil || tail-atomic.LoadUint32(r.sqHead) >= r.sqN {
			if r.err == nil {
				r.err = fmt.Errorf("submission queue full: %v", err)
			}
			clear(r.spare[:])
			return r.spare[:]
		}
	}
	i := tail & r.sqMask
	s := r.sqeMem[int(i)*sqeSize : int(i+1)*sqeSize]
	clear(s)
	r.sqArray[i] = i
	atomic.StoreUint32(r.sqTail, tail+1)
	r.pending++
	return s
}

// enter submits the queued SQEs and, when wait is set, waits for a
// completion. SQEs the kernel did not take yet stay queued for the next
// call.
// enterRetries bounds enter's waits out of EAGAIN, a millisecond each.
const enterRetries = 1000

func (r *ioRing) enter(wait bool) error {
	var minComplete, flags uintptr
	if wait {
		minComplete, flags = 1, ioringEnterGetEvents
	}
	for tries := 0; ; tries++ {
		n, _, errno := syscall.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.pending), minComplete, flags, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno == syscall.EAGAIN && tries < enterRetries {
			// The kernel could not allocate for the submission (memory
			// pressure): a shared ring serves every mount, so it waits
			// rather than fail.
			time.Sleep(time.Millisecond)
			continue
		}
		if errno != 0 {
			return fmt.Errorf("io_uring_enter: %w", errno)
		}
		r.pending -= uint32(n)
		return nil
	}
}

// reap calls fn for each completion, giving its slot back to the kernel
// first (fn may submit, and the kernel complete, more).
func (r *ioRing) reap(fn func(userData uint64, res int32)) {
	head := *r.cqHead
	for tail := atomic.LoadUint32(r.cqTail); head != tail; {
		c := r.cqMem[r.cqOff+(head&r.cqMask)*cqeSize:]
		ud, res := *(*uint64)(unsafe.Pointer(&c[0])), *(*int32)(unsafe.Pointer(&c[8]))
		head++
		atomic.StoreUint32(r.cqHead, head)
		fn(ud, res)
	}
}
