// Package cputest runs test code on chosen CPUs: FUSE over io_uring
// queues a request on the ring of the CPU that made it, so a test of what
// one ring does while another waits pins its callers.
package cputest

import (
	"fmt"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// On runs fn on an OS thread of its own pinned to cpu and returns its
// result on the channel.
func On(cpu int, fn func() error) <-chan error {
	done := make(chan error, 1)
	go func() {
		// The thread goes back to the runtime unpinned, rather than ending
		// with the goroutine: a child process started with Pdeathsig from
		// that thread earlier (a test's gateway or daemon) would get its
		// signal when the thread ends.
		runtime.LockOSThread()
		var was, set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &was); err != nil {
			done <- fmt.Errorf("sched_getaffinity: %w", err)
			return // the thread ends, locked: its affinity is unknown
		}
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("pin to CPU %d: %w", cpu, err)
			return
		}
		err := fn()
		if unix.SchedSetaffinity(0, &was) == nil {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return done
}

// Usable returns the CPUs this process may run on.
func Usable(t testing.TB) []int {
	t.Helper()
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatalf("sched_getaffinity: %v", err)
	}
	var cpus []int
	for c := 0; len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}
