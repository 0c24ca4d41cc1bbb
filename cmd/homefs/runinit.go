package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// runInit is PID 1 of a homefs run's namespaces: it makes the mount
// namespace private to the run, shows each part of the session at its
// canonical path, starts CMD as the run's user, forwards signals to it,
// reaps the orphans a PID 1 inherits, and exits with CMD's status. When
// it exits, the kernel ends every other process of the namespace.
func runInit() int {
	var spec runSpec
	f := os.NewFile(3, "spec")
	err := json.NewDecoder(f).Decode(&spec)
	f.Close()
	if err == nil && len(spec.Argv) == 0 {
		err = errors.New("no command")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "homefs run: bad spec:", err)
		return exitOther
	}
	if err := setupRunMounts(spec); err != nil {
		fmt.Fprintln(os.Stderr, "homefs run:", err)
		return exitOther
	}
	// exec.Command looks CMD up in this process's PATH: CMD's.
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			os.Setenv("PATH", v)
		}
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env, cmd.Dir = spec.Env, spec.Cwd
	if spec.UID != 0 || spec.GID != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: spec.UID, Gid: spec.GID, Groups: spec.Groups}}
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "homefs run: start %s as uid %d in %s: %v\n", spec.Argv[0], spec.UID, spec.Cwd, err)
		if errors.Is(err, fs.ErrPermission) {
			fmt.Fprintln(os.Stderr, "homefs run: the user must be able to reach the canonical paths (every parent directory searchable) and to execute the command")
		}
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return 127
		}
		return 126
	}
	pid := cmd.Process.Pid
	for {
		// Reap every child that ended; CMD's status ends the run.
		for {
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || got <= 0 {
				break
			}
			if got == pid {
				if ws.Signaled() {
					return 128 + int(ws.Signal())
				}
				return ws.ExitStatus()
			}
		}
		select {
		case sig := <-sigs:
			_ = syscall.Kill(pid, sig.(syscall.Signal))
		case <-chld:
		}
	}
}

// setupRunMounts makes the namespace's mounts: nothing propagates to the
// host, /proc shows the new PID namespace, each bind shows a directory of
// the daemon's mount at its canonical path.
func setupRunMounts(spec runSpec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the mount namespace private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, b := range spec.Binds {
		if err := mkdirOwned(b.Source, spec.UID, spec.GID); err != nil {
			return fmt.Errorf("create %s in the session: %w", b.Source, err)
		}
		if err := os.MkdirAll(b.Target, 0o755); err != nil {
			return fmt.Errorf("canonical path %s: %w", b.Target, err)
		}
		if err := unix.Mount(b.Source, b.Target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("show %s at %s: %w", b.Source, b.Target, err)
		}
	}
	return nil
}

// mkdirOwned creates dir and its missing parents, each owned by uid:gid,
// or when the run keeps root (uid and gid 0) by its parent's owner: a
// part the session lacks belongs to whoever owns the session.
func mkdirOwned(dir string, uid, gid uint32) error {
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return fmt.Errorf("%s: %w", dir, syscall.ENOTDIR)
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if err := mkdirOwned(parent, uid, gid); err != nil {
		return err
	}
	if uid == 0 && gid == 0 {
		var st syscall.Stat_t
		if err := syscall.Stat(parent, &st); err != nil {
			return err
		}
		uid, gid = st.Uid, st.Gid
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // another run made it
		}
		return err
	}
	return os.Chown(dir, int(uid), int(gid))
}
