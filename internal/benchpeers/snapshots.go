package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/homefs/homefs/internal/api"
)

// snapshotRounds is how many times capture and fork are timed on each
// side: each takes milliseconds, where one stall of the guest can take
// tens, so the table's fastest round needs more rounds than a workload's.
const snapshotRounds = 10

// The capture and fork rows' targets.
const (
	nameSnapHomefs = "homefs (CLI)"
	nameSnapAPI    = "homefs (socket API)"
	nameSnapBtrfs  = "btrfs subvolume snapshot"
)

// fill writes what both sides snapshot: Go's tree and a rollout of the
// large file's size, durable.
func (r *rig) fill(ctx context.Context, dir string) (rollout string, err error) {
	tree := filepath.Join(dir, "tree")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return "", fmt.Errorf("fill: %w", err)
	}
	if err := run(ctx, tree, nil, "tar", "-xf", r.in.tar); err != nil {
		return "", err
	}
	rollout = filepath.Join(dir, "rollout.jsonl")
	return rollout, run(ctx, "", nil, "dd", "if="+r.in.big, "of="+rollout, "bs=1M", "conv=fsync", "status=none")
}

// change appends one line to the rollout, as a turn of an agent does
// between two captures.
func change(rollout string, round int) error {
	line := fmt.Appendf(nil, `{"type":"turn","round":%d}`+"\n", round)
	return appendLines(rollout, [][]byte{line})
}

// timed runs fn and records its time in the snapshot table.
func (r *rig) timed(target, key string, round int, fn func() error) error {
	start := time.Now()
	if err := fn(); err != nil {
		return fmt.Errorf("%s: %s: %w", target, key, err)
	}
	d := time.Since(start)
	r.res.addSnapshot(target, key, round, d)
	fmt.Fprintf(os.Stderr, "  %-26s %-8s %8.4f s\n", target, key, d.Seconds())
	return nil
}

// snapshotsHomefs captures a mounted session and forks the capture
// through the CLI, each round after a one-line change.
func (r *rig) snapshotsHomefs(ctx context.Context, h *homefsTarget) error {
	mnt := filepath.Join(r.work, "mnt", "snap")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return fmt.Errorf("snapshots: %w", err)
	}
	if err := h.cli(ctx, "session", "create", "snap"); err != nil {
		return err
	}
	if err := h.cli(ctx, "mount", "snap", mnt); err != nil {
		return err
	}
	r.undo.push("unmount "+mnt, func() error {
		if err := h.cli(context.Background(), "unmount", mnt); err != nil {
			return errors.Join(err, unmount(mnt))
		}
		return nil
	})
	rollout, err := r.fill(ctx, mnt)
	if err != nil {
		return err
	}
	if err := h.cli(ctx, "capture", "snap"); err != nil { // stores the bytes: not timed
		return err
	}
	if err := r.snapshotRounds(cliSnapshotter(ctx, h), rollout, 0); err != nil {
		return err
	}
	return r.snapshotRounds(apiSnapshotter(ctx, h), rollout, snapshotRounds)
}

// snapshotter is one way of calling homefs's capture (which returns the
// snapshot's id) and fork (of that snapshot, into a new session).
type snapshotter struct {
	target  string
	capture func() (string, error)
	fork    func(id, target string) error
}

// cliSnapshotter calls them through the CLI, a process each.
func cliSnapshotter(ctx context.Context, h *homefsTarget) snapshotter {
	return snapshotter{nameSnapHomefs,
		func() (string, error) {
			out, err := h.out(ctx, "capture", "snap")
			return strings.TrimSpace(out), err
		},
		func(id, target string) error { return h.cli(ctx, "fork", "snap@"+id, target) }}
}

// apiSnapshotter calls them through the daemon's socket from this
// process, as a platform that keeps a client does: the daemon's work and
// the round trip, without a process's start.
func apiSnapshotter(ctx context.Context, h *homefsTarget) snapshotter {
	c := api.NewClient(api.DefaultSocket(h.root))
	return snapshotter{nameSnapAPI,
		func() (string, error) {
			info, err := c.Capture(ctx, "snap", api.CaptureRequest{})
			if err != nil {
				return "", err
			}
			return info.ID, nil
		},
		func(id, target string) error {
			_, err := c.Fork(ctx, api.ForkRequest{Source: "snap@" + id, Target: target})
			return err
		}}
}

// snapshotRounds times s's capture and fork, each round after a one-line
// change of the rollout (lines numbered from first).
func (r *rig) snapshotRounds(s snapshotter, rollout string, first int) error {
	for round := range snapshotRounds {
		if err := change(rollout, first+round); err != nil {
			return err
		}
		var id string
		if err := r.timed(s.target, "capture", round, func() (err error) {
			id, err = s.capture()
			return err
		}); err != nil {
			return err
		}
		if err := r.timed(s.target, "fork", round, func() error {
			return s.fork(id, fmt.Sprintf("snap-fork-%d", first+round))
		}); err != nil {
			return err
		}
	}
	return nil
}

// snapshotsBtrfs does the same on a btrfs subvolume on a loop device: a
// read-only snapshot of it, then a writable snapshot of that.
func (r *rig) snapshotsBtrfs(ctx context.Context) error {
	mnt := filepath.Join(r.work, "mnt", "btrfs")
	size := 2*r.sc.bigBytes + 4<<30
	if err := loopFS(ctx, &r.undo, filepath.Join(r.work, "btrfs.img"), size, mnt, "mkfs.btrfs", "-q", "-f"); err != nil {
		return err
	}
	sv := filepath.Join(mnt, "sv")
	if err := run(ctx, "", nil, "btrfs", "subvolume", "create", sv); err != nil {
		return err
	}
	rollout, err := r.fill(ctx, sv)
	if err != nil {
		return err
	}
	if err := run(ctx, "", nil, "sync"); err != nil {
		return err
	}
	for round := range snapshotRounds {
		if err := change(rollout, round); err != nil {
			return err
		}
		snap := filepath.Join(mnt, fmt.Sprintf("snap-%d", round))
		if err := r.timed(nameSnapBtrfs, "capture", round, func() error {
			return run(ctx, "", nil, "btrfs", "subvolume", "snapshot", "-r", sv, snap)
		}); err != nil {
			return err
		}
		if err := r.timed(nameSnapBtrfs, "fork", round, func() error {
			return run(ctx, "", nil, "btrfs", "subvolume", "snapshot", snap, filepath.Join(mnt, fmt.Sprintf("fork-%d", round)))
		}); err != nil {
			return err
		}
	}
	return nil
}
