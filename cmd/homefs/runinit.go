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
	"runtime"
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
	// First: a signal that comes before this is CMD's, not the init's end.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	chld := make(chan os.Signal, 1)
	signal.Notify(chld, syscall.SIGCHLD)
	spec, err := readRunSpec()
	if err != nil {
		fmt.Fprintln(os.Stderr, "homefs run: bad spec:", err)
		return runSetupStatus
	}
	if err := setupRunMounts(spec); err != nil {
		fmt.Fprintln(os.Stderr, "homefs run:", err)
		return runSetupStatus
	}
	if st, err := os.Stat(spec.Cwd); err != nil || !st.IsDir() {
		fmt.Fprintf(os.Stderr, "homefs run: working directory %s: not a directory in the run (%v)\n", spec.Cwd, err)
		return runSetupStatus
	}
	// exec.Command looks CMD up in this process's PATH: CMD's.
	for _, kv := range spec.Env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			os.Setenv("PATH", v)
		}
	}
	// Nothing CMD runs gains privileges (setuid binaries, file
	// capabilities): the agent controls what the run's mounts show, and a
	// privileged program reading it could be led anywhere.
	// It is a thread's attribute: CMD is forked from this thread.
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "homefs run: no_new_privs:", err)
		return runSetupStatus
	}
	cmd := runInitChild(spec)
	if err := cmd.Start(); err != nil {
		return startFailed(spec, err)
	}
	if spec.TTY {
		cmd.Stdin.(*os.File).Close()
	}
	return reapUntil(cmd.Process.Pid, sigs, chld)
}

// readRunSpec reads the spec homefs run writes to fd 3.
func readRunSpec() (runSpec, error) {
	var spec runSpec
	f := os.NewFile(3, "spec")
	err := json.NewDecoder(f).Decode(&spec)
	f.Close()
	if err == nil && len(spec.Argv) == 0 {
		err = errors.New("no command")
	}
	return spec, err
}

// runInitChild is CMD as spec describes it, to be started by the init.
func runInitChild(spec runSpec) *exec.Cmd {
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env, cmd.Dir = spec.Env, spec.Cwd
	// A session of its own: CMD never has the caller's terminal as its
	// controlling terminal; on a terminal it gets its pseudo-terminal.
	attr := &syscall.SysProcAttr{Setsid: true}
	if spec.TTY {
		tty := os.NewFile(4, "tty")
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		attr.Setctty, attr.Ctty = true, 0
	}
	if spec.UID != 0 || spec.GID != 0 {
		attr.Credential = &syscall.Credential{Uid: spec.UID, Gid: spec.GID, Groups: spec.Groups}
	}
	cmd.SysProcAttr = attr
	return cmd
}

// startFailed says why CMD did not start and returns the status a shell
// gives that failure: 127 for a command not found, 126 otherwise.
func startFailed(spec runSpec, err error) int {
	fmt.Fprintf(os.Stderr, "homefs run: start %s as uid %d in %s: %v\n", spec.Argv[0], spec.UID, spec.Cwd, err)
	if errors.Is(err, fs.ErrPermission) {
		fmt.Fprintln(os.Stderr, "homefs run: the user must be able to reach the canonical paths (every parent directory searchable) and to execute the command")
	}
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		return 127
	}
	return 126
}

// reapUntil forwards sigs to pid and reaps every child that ends, until
// pid does, and returns its status as a shell reports it.
func reapUntil(pid int, sigs, chld <-chan os.Signal) int {
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
// host (the root is made a slave: the host's mounts still show), /proc shows the new PID namespace, each bind shows a directory of
// the daemon's mount at its canonical path.
//
// The init runs as root on paths others control: the agent owns the
// session's content and often a canonical path's parents (its home). So no
// path is followed through a symlink: each directory is reached one name at
// a time with RESOLVE_NO_SYMLINKS (and below the session's mount with
// RESOLVE_BENEATH), created with mkdirat where missing, and the bind is
// made between the descriptors themselves (open_tree, move_mount), so a
// symlink planted in the session or beside a canonical path can never make
// root create, chown or cover a directory elsewhere.
func setupRunMounts(spec runSpec) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("make the mount namespace private: %w", err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mount /proc: %w", err)
	}
	for _, b := range spec.Binds {
		if err := bindAt(b, spec.MountDir, spec.UID, spec.GID); err != nil {
			return err
		}
	}
	return nil
}

// fuseSuperMagic is statfs's f_type of a FUSE filesystem.
const fuseSuperMagic = 0x65735546

// bindAt shows b.Source at b.Target.
func bindAt(b nsBind, mountDir string, uid, gid uint32) error {
	mnt, err := openDir(unix.AT_FDCWD, mountDir, 0)
	if err != nil {
		return fmt.Errorf("the daemon's mount %s: %w", mountDir, err)
	}
	defer unix.Close(mnt)
	// The daemon's mount itself, never the directory under it: were it
	// unmounted meanwhile, the agent would write to the host's disk and
	// nothing would reach the session.
	var fsst unix.Statfs_t
	if err := unix.Fstatfs(mnt, &fsst); err != nil {
		return fmt.Errorf("the daemon's mount %s: %w", mountDir, err)
	}
	if fsst.Type != fuseSuperMagic {
		return fmt.Errorf("the daemon's mount %s is not mounted any more (filesystem type %#x): run again", mountDir, fsst.Type)
	}
	src, err := mkdirAll(mnt, b.Source, unix.RESOLVE_BENEATH, func(parent int) (uint32, uint32, error) {
		if uid != 0 || gid != 0 {
			return uid, gid, nil
		}
		// A root run: a part the session lacks belongs to whoever
		// owns the session.
		var st unix.Stat_t
		err := unix.Fstat(parent, &st)
		return st.Uid, st.Gid, err
	})
	if err != nil {
		return fmt.Errorf("%s in the session: %w", displaySubtree(b.Source), err)
	}
	defer unix.Close(src)
	dst, err := mkdirAll(unix.AT_FDCWD, b.Target, 0, func(int) (uint32, uint32, error) { return 0, 0, nil })
	if err != nil {
		return fmt.Errorf("canonical path %s: %w", b.Target, err)
	}
	defer unix.Close(dst)
	tree, err := unix.OpenTree(src, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("show %s at %s: %w", displaySubtree(b.Source), b.Target, err)
	}
	defer unix.Close(tree)
	if err := unix.MoveMount(tree, "", dst, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("show %s at %s: %w", displaySubtree(b.Source), b.Target, err)
	}
	return nil
}

func displaySubtree(s string) string {
	if s == "" || s == "." {
		return "the session root"
	}
	return s
}

// openDir opens the directory path (relative to dirfd) for use as a
// descriptor only, through no symlink.
func openDir(dirfd int, path string, resolve uint64) (int, error) {
	fd, err := unix.Openat2(dirfd, path, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | resolve,
	})
	if errors.Is(err, unix.ELOOP) {
		return -1, fmt.Errorf("a symlink on the way, which homefs run never follows: if the agent replaced a directory of the path with a symlink, remove it; if the host's path holds one (/home -> /var/home), give the layout the real path: %w", err)
	}
	return fd, err
}

// mkdirAll opens dir (relative to base, "" or "." for base itself), making
// each missing directory with mode 0755 and the owner owner(parent) names,
// and returns a descriptor of it. No name is followed through a symlink.
func mkdirAll(base int, dir string, resolve uint64, owner func(parent int) (uint32, uint32, error)) (int, error) {
	start := "."
	if strings.HasPrefix(dir, "/") {
		base, start = unix.AT_FDCWD, "/"
	}
	cur, err := openDir(base, start, resolve)
	if err != nil {
		return -1, err
	}
	path := start
	for _, name := range strings.Split(strings.Trim(dir, "/"), "/") {
		if name == "" || name == "." {
			continue
		}
		if name == ".." {
			unix.Close(cur)
			return -1, fmt.Errorf("%s: '..' in a path", dir)
		}
		path = filepath.Join(path, name)
		next, err := openDir(cur, name, resolve)
		if errors.Is(err, unix.ENOENT) {
			uid, gid, oerr := owner(cur)
			if oerr != nil {
				unix.Close(cur)
				return -1, oerr
			}
			if err := unix.Mkdirat(cur, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				unix.Close(cur)
				return -1, fmt.Errorf("mkdir %s: %w", path, err)
			}
			if next, err = openDir(cur, name, resolve); err == nil {
				// The new directory itself, by its descriptor: never a name
				// someone could swap for a symlink meanwhile.
				err = unix.Fchownat(next, "", int(uid), int(gid), unix.AT_EMPTY_PATH)
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, fmt.Errorf("%s: %w", path, err)
		}
		cur = next
	}
	return cur, nil
}
