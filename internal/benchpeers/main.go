// Command benchpeers measures homefs side by side with other filesystems
// on one disk in one run (make bench, docs/BENCHMARKS.md): ext4 on a loop
// device, kernel overlayfs and fuse-overlayfs with their upper directory
// on that ext4, and a session of bin/homefs serve whose root is on it,
// over io_uring and over /dev/fuse. Every target runs the same workloads
// (untar of Go's src/, git, grep, rm -rf, Codex's rollout appends, a
// large dd, cat of it warm and after a remount) BENCHCOUNT times, rounds
// interleaved across targets. Capture and fork through homefs's CLI are
// timed against btrfs subvolume snapshots on a loop device of their own.
//
// It prints a markdown table with ratios against ext4 and the best other
// peer, and writes the raw results (peers.json), the table (peers.md) and
// a chart (peers.svg) to BENCH_PEERS_OUT (default .bench/peers). A peer
// whose tool or kernel support is missing is skipped with a message.
// Everything it mounts or attaches is taken down on exit, also on SIGINT
// and SIGTERM.
//
// Usage, as root: go run ./internal/benchpeers -homefs bin/homefs
//
//	HOMEFS_BENCH_SCALE=small  64 MiB instead of 1 GiB, 2,000 appends
//	                          instead of 20,000, src/runtime instead of src/
//	BENCHCOUNT=N              rounds (default 2)
//	BENCH_PEERS_OUT=DIR       where the JSON, table and chart go
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
)

// scale is how large the workloads are.
type scale struct {
	name     string
	count    int   // rounds
	bigBytes int64 // the dd file and the snapshotted rollout
	bigName  string
	lines    int    // JSONL appends
	tree     string // what of $GOROOT is packed
	disk     int64  // the ext4 loop image
}

func scaleFromEnv() (scale, error) {
	sc := scale{name: "full", count: 2, bigBytes: 1 << 30, bigName: "1 GiB", lines: 20000, tree: "src", disk: 32 << 30}
	if os.Getenv("HOMEFS_BENCH_SCALE") == "small" {
		sc = scale{name: "small", count: 2, bigBytes: 64 << 20, bigName: "64 MiB", lines: 2000, tree: "src/runtime", disk: 8 << 30}
	}
	if v := os.Getenv("BENCHCOUNT"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return sc, fmt.Errorf("BENCHCOUNT=%q: want a count from 1 to 100", v)
		}
		sc.count = n
	}
	return sc, nil
}

// rig is one run: its scratch directory, what to take down, the inputs
// and the results.
type rig struct {
	work string
	bin  string
	disk string // the ext4 mount
	undo undo
	sc   scale
	in   *inputs
	res  *Results
}

func main() {
	bin := flag.String("homefs", "bin/homefs", "the homefs binary")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := mainErr(ctx, *bin)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchpeers:", err)
		os.Exit(1)
	}
}

func mainErr(ctx context.Context, bin string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("run as root: it mounts filesystems and loop devices")
	}
	for _, tool := range []string{"tar", "git", "grep", "dd", "cat", "losetup", "mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is needed: %w", tool, err)
		}
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return fmt.Errorf("homefs binary: %w", err)
	}
	sc, err := scaleFromEnv()
	if err != nil {
		return err
	}
	out := os.Getenv("BENCH_PEERS_OUT")
	if out == "" {
		out = ".bench/peers"
	}
	r := &rig{bin: bin, sc: sc, res: &Results{Scale: sc.name, Count: sc.count, SnapshotCount: snapshotRounds}}
	describe(ctx, r.res)
	if r.work, err = os.MkdirTemp("/var/tmp", "homefs-peers."); err != nil {
		return fmt.Errorf("scratch directory: %w", err)
	}
	r.undo.push("remove "+r.work, func() error { return os.RemoveAll(r.work) })
	defer r.undo.run()
	if err := r.measure(ctx); err != nil {
		return err
	}
	r.res.LoadEnd = loadavg()
	return r.report(out)
}

// measure prepares the inputs and the targets, runs the rounds, then the
// snapshots.
func (r *rig) measure(ctx context.Context) error {
	var err error
	fmt.Fprintf(os.Stderr, "benchpeers: %s scale, %d rounds, in %s\n", r.sc.name, r.sc.count, r.work)
	if r.in, err = makeInputs(ctx, r.work, r.sc); err != nil {
		return err
	}
	for _, s := range r.steps(nil) {
		r.res.Workloads = append(r.res.Workloads, Workload{s.key, s.label})
	}
	r.disk = filepath.Join(r.work, "mnt", "ext4")
	if err := loopFS(ctx, &r.undo, filepath.Join(r.work, "ext4.img"), r.sc.disk, r.disk, "mkfs.ext4", "-q", "-F"); err != nil {
		return err
	}
	targets, err := r.targets(ctx)
	if err != nil {
		return err
	}
	for round := range r.sc.count {
		fmt.Fprintf(os.Stderr, "round %d of %d\n", round+1, r.sc.count)
		for _, t := range targets {
			if err := r.suite(ctx, t, round); err != nil {
				return err
			}
		}
	}
	return r.snapshots(ctx, targets)
}

// targets sets up every target that this host can have, and notes the
// others as skipped.
func (r *rig) targets(ctx context.Context) ([]target, error) {
	mnt := func(name string) string { return filepath.Join(r.work, "mnt", name) }
	ext4 := plainDir{filepath.Join(r.disk, "ext4")}
	if err := os.Mkdir(ext4.path, 0o755); err != nil {
		return nil, fmt.Errorf("ext4: %w", err)
	}
	targets := []target{ext4}
	optional := []struct {
		name  string
		setup func() (target, error)
	}{
		{nameOverlay, func() (target, error) { return setupOverlay(ctx, &r.undo, r.disk, mnt("overlay"), false) }},
		{nameFuseOvl, func() (target, error) {
			if _, err := exec.LookPath("fuse-overlayfs"); err != nil {
				return nil, fmt.Errorf("fuse-overlayfs is not installed (Debian: apt-get install fuse-overlayfs)")
			}
			return setupOverlay(ctx, &r.undo, r.disk, mnt("fuse-overlayfs"), true)
		}},
		{nameHomeURing, func() (target, error) {
			if _, err := os.Stat("/sys/module/fuse/parameters/enable_uring"); err != nil {
				return nil, fmt.Errorf("this kernel has no FUSE over io_uring")
			}
			return setupHomefs(ctx, &r.undo, r.bin, r.disk, mnt("homefs-uring"), true)
		}},
		{nameHomeDev, func() (target, error) { return setupHomefs(ctx, &r.undo, r.bin, r.disk, mnt("homefs-dev"), false) }},
	}
	for _, o := range optional {
		t, err := o.setup()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "benchpeers: %s skipped: %v\n", o.name, err)
			r.res.Skipped = append(r.res.Skipped, Skip{o.name, err.Error()})
			continue
		}
		targets = append(targets, t)
	}
	for _, t := range targets {
		r.res.Targets = append(r.res.Targets, t.name())
	}
	return targets, nil
}

// snapshots times capture and fork on the first homefs target and btrfs
// snapshots, when each is there.
func (r *rig) snapshots(ctx context.Context, targets []target) error {
	fmt.Fprintln(os.Stderr, "capture and fork")
	for _, t := range targets {
		if h, ok := t.(*homefsTarget); ok {
			if err := r.snapshotsHomefs(ctx, h); err != nil {
				return err
			}
			break
		}
	}
	for _, tool := range []string{"mkfs.btrfs", "btrfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			why := tool + " is not installed (Debian: apt-get install btrfs-progs)"
			fmt.Fprintf(os.Stderr, "benchpeers: %s skipped: %s\n", nameSnapBtrfs, why)
			r.res.Skipped = append(r.res.Skipped, Skip{nameSnapBtrfs, why})
			return nil
		}
	}
	return r.snapshotsBtrfs(ctx)
}
