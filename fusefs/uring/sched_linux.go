package uring

import (
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// A pinned ring thread waits for the kernel's requests as SCHED_BATCH
// unless its last request moved data: the scheduler's wakeup check then
// does not preempt the running task for it, and it runs when that task
// sleeps or its time slice ends (not always: Linux 6.18 still switched to
// it at about half of grep -r's closes, see docs/ARCHITECTURE.md). A request whose caller waits for the reply
// (LOOKUP, OPEN, a READ of a page not cached) loses nothing by it: the
// caller sleeps at once, on the ring's CPU. A RELEASE, which the kernel
// sends without waiting at every close, no longer interrupts the process
// that closed: the ring serves it with that process's next request. grep
// -r over Go's tree opens 11,478 files, reads them from the page cache
// and closes them, and each close cost it two context switches more
// without this.
//
// It waits as SCHED_NORMAL, preempting as before:
//   - after a READ or a WRITE: readahead and write-back follow in the
//     background, and a ring that preempts the reader or writer lets it
//     move to an idle CPU, in parallel (git add -A of Go's tree took up
//     to a sixth longer where they waited);
//   - while a request is out with a goroutine (deferred): its reply comes
//     through the eventfd from another thread, while the ring's CPU may
//     run something else.
//
// An unpinned ring (a host with more CPUs than maxThreads) serves requests
// made on other CPUs and stays as it is, as does a thread the daemon was
// not started with SCHED_NORMAL on (an RT policy, or SCHED_BATCH already,
// is the administrator's choice).

// startBatch reports whether the ring thread may switch to SCHED_BATCH
// (see above), noting its nice value, which every switch keeps.
func (r *ring) startBatch() bool {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		r.log("fuse ring thread: scheduling policy", "err", err)
		return false
	}
	r.nice, r.policy = a.Nice, a.Policy
	return a.Policy == unix.SCHED_NORMAL
}

// settle sets the policy the ring thread waits with, before it waits.
func (r *ring) settle() {
	if !r.batch {
		return
	}
	want := uint32(unix.SCHED_BATCH)
	if r.handedOff > 0 || r.moved {
		want = unix.SCHED_NORMAL
	}
	if want == r.policy {
		return
	}
	// SCHED_FLAG_KEEP_PARAMS would keep the policy too: the nice value is
	// given again.
	a := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: want, Nice: r.nice}
	if err := unix.SchedSetAttr(0, &a, 0); err != nil {
		r.log("fuse ring thread: scheduling policy", "policy", want, "err", err)
		r.batch = false
		return
	}
	r.policy = want
}

// took notes the opcode of a request the ring thread took from the
// kernel: whether it moved data.
func (r *ring) took(e *entry) {
	op := (*fuse.InHeader)(unsafe.Pointer(&e.in[0])).Opcode
	r.moved = op == opRead || op == opWrite
}
