// Package threadtest tells tests what the process's threads are doing:
// how many there are (/proc/self/status), and how many wait for a FUSE
// kernel's requests, in io_uring_enter or in read(2) on /dev/fuse
// (/proc/self/task/*/syscall: the system call a blocked thread is in,
// and its arguments).
package threadtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Threads is the process's thread count.
func Threads() (int, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("no Threads in /proc/self/status")
}

// Waiting counts the process's threads blocked in io_uring_enter, and
// those blocked in read(2) on a /dev/fuse descriptor.
func Waiting() (inEnter, onDev int, err error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0, 0, err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join("/proc/self/task", task.Name(), "syscall"))
		if err != nil {
			continue // the thread ended
		}
		// "running", "-1 sp pc" outside a system call, else the number,
		// six arguments, sp and pc.
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		switch nr, _ := strconv.Atoi(f[0]); nr {
		case unix.SYS_IO_URING_ENTER:
			inEnter++
		case unix.SYS_READ:
			fd, err := strconv.ParseInt(strings.TrimPrefix(f[1], "0x"), 16, 32)
			if err != nil {
				continue
			}
			if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && p == "/dev/fuse" {
				onDev++
			}
		}
	}
	return inEnter, onDev, nil
}

// AwaitRings polls (30 s at most) until the threads waiting for the
// kernel's FUSE requests are rings ring threads in io_uring_enter and none
// on /dev/fuse, and returns an error saying what it last saw if they
// never are.
func AwaitRings(rings int) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		inEnter, onDev, err := Waiting()
		if err != nil {
			return err
		}
		if inEnter == rings && onDev == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d threads wait in io_uring_enter and %d on /dev/fuse; want %d and 0", inEnter, onDev, rings)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
