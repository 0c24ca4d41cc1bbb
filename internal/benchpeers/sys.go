package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// cmdTimeout bounds every command the harness runs; a full-scale
// workload takes seconds, so a command past this is stuck.
const cmdTimeout = 15 * time.Minute

// run runs name with args in dir (the current directory when empty), its
// output discarded, with env added to the harness's environment.
func run(ctx context.Context, dir string, env []string, name string, args ...string) error {
	return runTo(ctx, nil, dir, env, name, args...)
}

// output runs a command as run does and returns its standard output.
func output(ctx context.Context, dir string, env []string, name string, args ...string) (string, error) {
	var stdout bytes.Buffer
	err := runTo(ctx, &stdout, dir, env, name, args...)
	return stdout.String(), err
}

func runTo(ctx context.Context, stdout *bytes.Buffer, dir string, env []string, name string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.WaitDelay = 5 * time.Second
	var stderr bytes.Buffer
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, lastLine(stderr.String()))
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// dropCaches writes back dirty pages and drops the page cache, dentries
// and inodes, so the next read comes from the disk.
func dropCaches(ctx context.Context) error {
	if err := run(ctx, "", nil, "sync"); err != nil {
		return err
	}
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop caches: %w", err)
	}
	return nil
}

// unmount detaches dir, lazily when it is still busy after a few tries.
func unmount(dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	for range 5 {
		if err = run(ctx, "", nil, "umount", dir); err == nil {
			return nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	if lazyErr := run(ctx, "", nil, "umount", "-l", dir); lazyErr != nil {
		return errors.Join(err, lazyErr)
	}
	return nil
}

// undo is the stack of what the harness set up, taken down in reverse
// order on every exit.
type undo struct{ steps []undoStep }

type undoStep struct {
	what string
	fn   func() error
}

func (u *undo) push(what string, fn func() error) {
	u.steps = append(u.steps, undoStep{what, fn})
}

func (u *undo) run() {
	for i := len(u.steps) - 1; i >= 0; i-- {
		if err := u.steps[i].fn(); err != nil {
			fmt.Fprintf(os.Stderr, "benchpeers: cleanup: %s: %v\n", u.steps[i].what, err)
		}
	}
	u.steps = nil
}

// loopFS makes a filesystem of size bytes in a sparse image file on a
// loop device (mkfs is mkfs.ext4 or mkfs.btrfs with its arguments) and
// mounts it at dir.
func loopFS(ctx context.Context, u *undo, img string, size int64, dir string, mkfs ...string) error {
	f, err := os.Create(img)
	if err != nil {
		return fmt.Errorf("loop image: %w", err)
	}
	u.push("remove "+img, func() error { return os.Remove(img) })
	if err := errors.Join(f.Truncate(size), f.Close()); err != nil {
		return fmt.Errorf("loop image: %w", err)
	}
	dev, err := output(ctx, "", nil, "losetup", "--find", "--show", img)
	if err != nil {
		return err
	}
	dev = strings.TrimSpace(dev)
	u.push("detach "+dev, func() error {
		return run(context.Background(), "", nil, "losetup", "--detach", dev)
	})
	if err := run(ctx, "", nil, mkfs[0], append(mkfs[1:], dev)...); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("mountpoint: %w", err)
	}
	if err := run(ctx, "", nil, "mount", dev, dir); err != nil {
		return err
	}
	u.push("unmount "+dir, func() error { return unmount(dir) })
	return nil
}
