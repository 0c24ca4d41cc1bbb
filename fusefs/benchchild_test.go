package fusefs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The small-operation benchmarks (one round trip, JSONL appends, 4 KiB
// random writes, tar's sequence on small files) run their loop in a
// process of their own, as an agent's harness is one: a request from the
// daemon's own process switches between two threads of one address
// space, while one from another process switches address spaces twice
// per round trip, which costs far more on some hosts (on the PVM guests
// here an fchmod round trip took 9.6 µs from the daemon's process and
// 24-30 µs from another; docs/BENCHMARKS.md). The native target runs in
// a child too, so both sides pay the same process. The child times its
// own loop, and that time replaces the benchmark's (which includes
// starting the child).

// benchWorkloads are the loops a child runs: each gets its iteration
// count and its arguments, and returns the time its loop took.
var benchWorkloads = map[string]func(n int, args []string) (time.Duration, error){
	"bench-roundtrip": workloadRoundTrip,
	"bench-jsonl":     workloadJSONL,
	"bench-randwrite": workloadRandWrite,
	"bench-smallfile": workloadSmallFile,
}

// inChild runs b.N iterations of workload in a child process and reports
// the child's time per op, and its throughput when bytesPerOp is set.
func inChild(b *testing.B, bytesPerOp int64, workload string, args ...string) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	out, err := helper(ctx, workload, append([]string{strconv.Itoa(b.N)}, args...)...).Output()
	if err != nil {
		b.Fatalf("%s %v: %v", workload, args, err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || ns <= 0 {
		b.Fatalf("%s: no time in its output %q", workload, out)
	}
	b.ReportMetric(float64(ns)/float64(b.N), "ns/op")
	if bytesPerOp > 0 {
		b.ReportMetric(float64(bytesPerOp)*float64(b.N)*1e3/float64(ns), "MB/s")
	}
}

// runWorkload is the child's side: it runs the named loop and prints the
// time it took in nanoseconds.
func runWorkload(mode string, args []string) error {
	w := benchWorkloads[mode]
	if len(args) < 1 {
		return errors.New("usage: N ARGS...")
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		return fmt.Errorf("bad iteration count %q", args[0])
	}
	d, err := w(n, args[1:])
	if err != nil {
		return err
	}
	fmt.Println(d.Nanoseconds())
	return nil
}

// workloadRoundTrip: PATH. One op is an fchmod of an open file.
func workloadRoundTrip(n int, args []string) (time.Duration, error) {
	fd, err := unix.Open(args[0], unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	start := time.Now()
	for i := range n {
		if err := unix.Fchmod(fd, 0o644|uint32(i&1)<<6); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// workloadJSONL: PATH wronly|rdwr LINES. One op appends LINES JSON lines
// (jsonLines) through an O_APPEND descriptor, with an fsync after every
// 32nd.
func workloadJSONL(n int, args []string) (time.Duration, error) {
	if len(args) != 3 {
		return 0, errors.New("usage: PATH wronly|rdwr|rdwr-nosync LINES")
	}
	// rdwr-nosync appends to the existing file and never fsyncs (Codex).
	flags, sync := os.O_CREATE|os.O_TRUNC|os.O_WRONLY, true
	switch args[1] {
	case "rdwr":
		flags = os.O_CREATE | os.O_TRUNC | os.O_RDWR
	case "rdwr-nosync":
		flags, sync = os.O_RDWR, false
	}
	count, err := strconv.Atoi(args[2])
	if err != nil {
		return 0, err
	}
	lines, _ := jsonLines(count)
	f, err := os.OpenFile(args[0], flags|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	start := time.Now()
	for range n {
		for i, line := range lines {
			if _, err := f.Write(line); err != nil {
				return 0, err
			}
			if sync && i%32 == 31 {
				if err := f.Sync(); err != nil {
					return 0, err
				}
			}
		}
	}
	return time.Since(start), nil
}

// workloadRandWrite: PATH SIZE. One op is randBatch 4 KiB writes at random
// aligned offsets of the existing file of SIZE bytes, each followed by
// fsync; every block written is incompressible and unique.
func workloadRandWrite(n int, args []string) (time.Duration, error) {
	if len(args) != 2 {
		return 0, errors.New("usage: PATH SIZE")
	}
	size, err := strconv.ParseInt(args[1], 10, 64)
	if err != nil {
		return 0, err
	}
	f, err := os.OpenFile(args[0], os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(4, 4096))
	block := make([]byte, 4096)
	rand.NewChaCha8([32]byte{2}).Read(block)
	stamp := uint64(time.Now().UnixNano())
	start := time.Now()
	for range n {
		for range randBatch {
			stamp++
			putUint64(block, stamp)
			if _, err := f.WriteAt(block, rng.Int64N(size/4096)*4096); err != nil {
				return 0, err
			}
			if err := f.Sync(); err != nil {
				return 0, err
			}
		}
	}
	return time.Since(start), nil
}

// workloadSmallFile: BASE. One op is one file written as tar writes it
// (open O_CREAT|O_EXCL, write 2 KiB, futimens, fchown, fchmod, close),
// 1,000 files per directory below BASE.
func workloadSmallFile(n int, args []string) (time.Duration, error) {
	data := make([]byte, 2048)
	rand.NewChaCha8([32]byte{3}).Read(data)
	mtime := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, {Sec: 1_700_000_000}}
	sub := ""
	start := time.Now()
	for i := range n {
		if i%1000 == 0 {
			sub = filepath.Join(args[0], fmt.Sprint(i/1000))
			if err := os.Mkdir(sub, 0o755); err != nil {
				return 0, err
			}
		}
		fd, err := unix.Open(filepath.Join(sub, fmt.Sprint(i)), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
		if err == nil {
			_, err = unix.Write(fd, data)
		}
		if err == nil {
			err = unix.UtimesNanoAt(fd, "", mtime, unix.AT_EMPTY_PATH)
		}
		if err == nil {
			err = unix.Fchown(fd, 0, 0)
		}
		if err == nil {
			err = unix.Fchmod(fd, 0o644)
		}
		if err == nil {
			err = unix.Close(fd)
		}
		if err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}
