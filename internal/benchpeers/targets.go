package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// A target is one filesystem the workloads run on.
type target interface {
	// name is the target's column in the table.
	name() string
	// dir is where the workloads write.
	dir() string
	// remount takes the target's own layer down and up again (nothing
	// for ext4) so that the next read after a cache drop comes from the
	// disk or the store.
	remount(ctx context.Context) error
}

// The targets' names, in the table's order.
const (
	nameExt4      = "ext4"
	nameOverlay   = "overlayfs"
	nameFuseOvl   = "fuse-overlayfs"
	nameHomeURing = "homefs io_uring"
	nameHomeDev   = "homefs /dev/fuse"
)

// plainDir is a directory on the ext4 disk itself.
type plainDir struct{ path string }

func (p plainDir) name() string                  { return nameExt4 }
func (p plainDir) dir() string                   { return p.path }
func (p plainDir) remount(context.Context) error { return nil }

// overlay is kernel overlayfs or fuse-overlayfs with an empty lower
// directory and its upper directory on the ext4 disk.
type overlay struct {
	label  string
	merged string
	opts   string
	fuse   bool
}

func setupOverlay(ctx context.Context, u *undo, disk, mnt string, fuse bool) (*overlay, error) {
	o := &overlay{label: nameOverlay, merged: mnt}
	base := filepath.Join(disk, "overlay")
	if fuse {
		o.label, o.fuse, base = nameFuseOvl, true, filepath.Join(disk, "fuse-overlayfs")
	}
	lower, upper, work := filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "work")
	for _, d := range []string{lower, upper, work, mnt} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("%s: %w", o.label, err)
		}
	}
	o.opts = fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work)
	if err := o.mount(ctx); err != nil {
		return nil, err
	}
	u.push("unmount "+mnt, func() error { return unmount(mnt) })
	return o, nil
}

func (o *overlay) mount(ctx context.Context) error {
	if o.fuse {
		return run(ctx, "", nil, "fuse-overlayfs", "-o", o.opts, o.merged)
	}
	return run(ctx, "", nil, "mount", "-t", "overlay", "overlay", "-o", o.opts, o.merged)
}

func (o *overlay) name() string { return o.label }
func (o *overlay) dir() string  { return o.merged }

func (o *overlay) remount(ctx context.Context) error {
	if err := unmount(o.merged); err != nil {
		return err
	}
	return o.mount(ctx)
}

// homefsTarget is a session of a homefs daemon (bin/homefs serve) whose
// root is on the ext4 disk, mounted through the CLI.
type homefsTarget struct {
	label   string
	bin     string
	root    string
	mnt     string
	uring   string // serve --fuse-uring
	log     *os.File
	daemon  *exec.Cmd
	exited  chan error
	mounted bool
}

func setupHomefs(ctx context.Context, u *undo, bin, disk, mnt string, uring bool) (*homefsTarget, error) {
	h := &homefsTarget{label: nameHomeDev, bin: bin, mnt: mnt, uring: "off"}
	if uring {
		h.label, h.uring = nameHomeURing, "on"
	}
	h.root = filepath.Join(disk, "homefs-"+h.uring, "root")
	if err := errors.Join(os.MkdirAll(h.root, 0o755), os.MkdirAll(mnt, 0o755)); err != nil {
		return nil, fmt.Errorf("%s: %w", h.label, err)
	}
	log, err := os.Create(filepath.Join(filepath.Dir(h.root), "serve.log"))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", h.label, err)
	}
	h.log = log
	u.push("stop "+h.label, func() error { return errors.Join(h.stop(), log.Close()) })
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	if err := h.cli(ctx, "session", "create", "bench"); err != nil {
		return nil, err
	}
	if err := h.mount(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

func (h *homefsTarget) name() string { return h.label }
func (h *homefsTarget) dir() string  { return h.mnt }

func (h *homefsTarget) cli(ctx context.Context, args ...string) error {
	_, err := h.out(ctx, args...)
	return err
}

func (h *homefsTarget) out(ctx context.Context, args ...string) (string, error) {
	return output(ctx, "", []string{"HOMEFS_ROOT=" + h.root}, h.bin, args...)
}

// start runs the daemon and waits (bounded) until it answers.
func (h *homefsTarget) start(ctx context.Context) error {
	cmd := exec.Command(h.bin, "serve", "--fuse-uring="+h.uring, "--log-level", "warn")
	cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+h.root)
	cmd.Stdout, cmd.Stderr = h.log, h.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: serve: %w", h.label, err)
	}
	h.daemon, h.exited = cmd, make(chan error, 1)
	go func() { h.exited <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-h.exited:
			h.daemon = nil
			return fmt.Errorf("%s: serve exited (%v); its log: %s", h.label, err, h.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if h.cli(ctx, "status", "--no-remote-check") == nil {
			return nil
		}
	}
	return fmt.Errorf("%s: the daemon did not answer within 30 s; its log: %s", h.label, h.log.Name())
}

// stop unmounts the session and stops the daemon (SIGTERM, then SIGKILL
// after a minute).
func (h *homefsTarget) stop() error {
	var err error
	if h.mounted {
		if err = h.cli(context.Background(), "unmount", h.mnt); err != nil {
			err = errors.Join(err, unmount(h.mnt))
		}
		h.mounted = false
	}
	if h.daemon == nil {
		return err
	}
	_ = h.daemon.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
	case <-time.After(time.Minute):
		_ = h.daemon.Process.Kill()
		<-h.exited
		err = errors.Join(err, fmt.Errorf("%s: the daemon ignored SIGTERM for a minute", h.label))
	}
	h.daemon = nil
	return err
}

// mount mounts the session and checks that it got the transport the
// target is named after.
func (h *homefsTarget) mount(ctx context.Context) error {
	if err := h.cli(ctx, "mount", "bench", h.mnt); err != nil {
		return err
	}
	h.mounted = true
	js, err := h.out(ctx, "status", "--json", "--no-remote-check")
	if err != nil {
		return err
	}
	var st struct {
		Mounts []struct{ Dir, Transport string }
	}
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		return fmt.Errorf("%s: status: %w", h.label, err)
	}
	want := map[string]string{"on": "io_uring", "off": "/dev/fuse"}[h.uring]
	for _, m := range st.Mounts {
		if m.Dir == h.mnt && m.Transport != want {
			return fmt.Errorf("%s: the mount got transport %q, not %q", h.label, m.Transport, want)
		}
	}
	return nil
}

func (h *homefsTarget) remount(ctx context.Context) error {
	if err := h.stop(); err != nil {
		return err
	}
	if err := h.start(ctx); err != nil {
		return err
	}
	return h.mount(ctx)
}
