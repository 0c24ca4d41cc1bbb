package uring

import "golang.org/x/sys/unix"

// A pinned ring thread runs as SCHED_BATCH: the kernel's scheduler then
// never preempts the running task to wake it, and it runs when that task
// sleeps or its time slice ends. A request whose caller waits for the
// reply (LOOKUP, OPEN, a READ of a page not cached) loses nothing by it:
// the caller sleeps at once, on the ring's CPU. A RELEASE, which the
// kernel sends without waiting at every close, no longer interrupts the
// process that closed: the ring serves it with that process's next
// request. grep -r over Go's tree opens 11,478 files, and each close cost
// it two context switches more without this (measured: 19.4k context
// switches of grep against 11.9k; 0.23 s against 0.20 s, ext4 0.12 s).
//
// While a request is out with a goroutine (deferred), the thread is
// SCHED_NORMAL again: the goroutine's reply wakes it through the eventfd
// from another thread, while its CPU may run something else, which it
// must preempt as before. An unpinned ring (a host with more CPUs than
// maxThreads) serves requests made on other CPUs and stays as it is, as
// does a thread the daemon was not started with SCHED_NORMAL on (an RT
// policy, or SCHED_BATCH already, is the administrator's choice).

// startBatch makes the ring thread SCHED_BATCH if it may be (see above),
// and reports whether it is now.
func (r *ring) startBatch() bool {
	a, err := unix.SchedGetAttr(0, 0)
	if err != nil {
		r.srv.log("fuse ring thread: scheduling policy", "err", err)
		return false
	}
	if a.Policy != unix.SCHED_NORMAL {
		return false
	}
	r.nice = a.Nice
	return r.setPolicy(unix.SCHED_BATCH)
}

// setPolicy sets the ring thread's scheduling policy, keeping the nice
// value it started with. (SCHED_FLAG_KEEP_PARAMS would keep the policy
// too.)
func (r *ring) setPolicy(policy uint32) bool {
	a := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: policy, Nice: r.nice}
	if err := unix.SchedSetAttr(0, &a, 0); err != nil {
		r.srv.log("fuse ring thread: scheduling policy", "policy", policy, "err", err)
		return false
	}
	return true
}

// handOff notes that a request goes to a goroutine: the first makes the
// thread preempt again. Called on the ring thread.
func (r *ring) handOff() {
	if r.handedOff == 0 && r.batch && !r.setPolicy(unix.SCHED_NORMAL) {
		r.batch = false
	}
	r.handedOff++
}

// handedBack notes that n requests came back from goroutines: the last
// makes the thread SCHED_BATCH again. Called on the ring thread.
func (r *ring) handedBack(n int) {
	r.handedOff -= n
	if r.handedOff == 0 && r.batch && !r.setPolicy(unix.SCHED_BATCH) {
		r.batch = false
	}
}
