package fusefs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/internal/fusectl"
	"github.com/homefs/homefs/internal/mountinfo"
)

// The engine's end, in order: see doc.go, Shutdown.

// defaultShutdownGrace is how long a busy mount's open files are served
// after it was detached, unless Options.ShutdownGrace says otherwise.
const defaultShutdownGrace = 5 * time.Second

// connAbortWait bounds the wait for a mount's servers to end after its
// connection was aborted.
const connAbortWait = 10 * time.Second

// connOf returns the fusectl name of the connection of the homefs mount
// at dir: the last (topmost) homefs entry of the mount table there.
func connOf(dir string) (string, error) {
	return mountinfo.ConnAt(dir, mountinfo.Entry.IsHomefs)
}

// detachLazily takes the mount out of the mount table without waiting
// for its users (MNT_DETACH): the files open in it stay served.
func (m *Mount) detachLazily() error {
	if os.Geteuid() == 0 {
		return syscall.Unmount(m.dir, syscall.MNT_DETACH)
	}
	bin, err := exec.LookPath("fusermount3")
	if err != nil {
		if bin, err = exec.LookPath("fusermount"); err != nil {
			return err
		}
	}
	out, err := exec.Command(bin, "-u", "-z", m.dir).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -u -z: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// servedUntilEnd returns a channel closed once every server of the mount
// (go-fuse's reader, the rings) has ended: the connection is gone.
func (m *Mount) servedUntilEnd() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		m.server.Wait()
		if m.uring != nil {
			m.uring.Wait()
		}
		close(done)
	}()
	return done
}

// endMounts ends every mount for Close: an unmount, or a lazy detach of a
// busy mount whose open files are served until they are closed or grace
// has passed (or ctx ends), and then the abort of each connection still
// alive. Mounts that could not leave the mount table are reported, and
// stay in e.mounts. busy holds the sessions of mounts that did not
// unmount cleanly: only there may a writer still hold a file (a clean
// unmount means no descriptor or mapping of the mount is left).
func (e *Engine) endMounts(ctx context.Context, mounts []*Mount) (busy map[*Session]bool, _ error) {
	busy = make(map[*Session]bool)
	var errs []error
	ended := make(map[*Mount]<-chan struct{}, len(mounts))
	detached := make(map[*Mount]bool, len(mounts))
	for _, m := range mounts {
		unmount := m.server.Unmount
		if m.uring != nil {
			unmount = m.uring.Unmount
		}
		ended[m] = m.servedUntilEnd()
		err := unmount()
		if err == nil {
			detached[m] = true
			continue
		}
		busy[m.sess] = true
		if lerr := m.detachLazily(); lerr != nil {
			if errors.Is(lerr, syscall.EINVAL) {
				// Not a mountpoint any more: someone detached it.
				detached[m] = true
				continue
			}
			errs = append(errs, fmt.Errorf("unmount %s: %w; detach: %w", m.dir, err, lerr))
			continue
		}
		detached[m] = true
		m.log.Info("mount busy: detached, its open files are served for a grace period", "mount", m.dir, "grace", e.grace, "err", err)
	}
	over := make(chan struct{})
	grace := time.AfterFunc(e.grace, func() { close(over) })
	defer grace.Stop()
	for _, m := range mounts {
		select {
		case <-ended[m]:
		case <-over:
		case <-ctx.Done():
		}
	}
	for _, m := range mounts {
		select {
		case <-ended[m]:
			continue
		default:
		}
		// Writers still hold files open: after the abort they get errors,
		// never a success the flush below would not hold.
		if err := fusectl.Abort(m.conn); err != nil {
			errs = append(errs, fmt.Errorf("end the connection of %s: %w", m.dir, err))
			continue
		}
		m.log.Warn("ended the connection of a mount with files still open", "mount", m.dir, "conn", m.conn)
		select {
		case <-ended[m]:
		case <-time.After(connAbortWait):
			errs = append(errs, fmt.Errorf("servers of %s still running after the connection was aborted", m.dir))
		}
	}
	for _, m := range mounts {
		if detached[m] {
			m.forget()
		}
	}
	return busy, errors.Join(errs...)
}

// sealBackings makes the backing files of s that a writer may still reach
// immutable (Close calls it for the sessions of mounts that did not
// unmount cleanly), so that a passthrough writer still holding one (its connection has ended) gets
// EPERM rather than a write nobody will read: the kernel sends those
// writes to the backing file without asking the daemon, also once the
// connection is gone. ext4 and xfs refuse writes to an immutable file
// through descriptors opened before. Setting the flag needs
// CAP_LINUX_IMMUTABLE; without it such writes after the final flush are
// lost, and the failure is logged.
func (s *Session) sealBackings() {
	var failed error
	for _, n := range s.backed.list() {
		n.mu.Lock()
		// Only a file a writer may still reach: a passthrough handle is
		// open, or a mapping may outlive one. Sealing the others would
		// only keep their names from being removed after the flush.
		if b := n.data.backing; b != nil && (b.opens > 0 || b.mappable()) {
			if err := setImmutable(b.f, true); err != nil && failed == nil {
				failed = err
			}
		}
		n.mu.Unlock()
	}
	if failed != nil {
		s.log.Warn("could not seal backing files: passthrough writes after the final flush would be lost", "session", s.name, "err", failed)
	}
}

// fsImmutableFL is FS_IMMUTABLE_FL of linux/fs.h (chattr +i).
const fsImmutableFL = 0x10

// setImmutable sets or clears f's FS_IMMUTABLE_FL.
func setImmutable(f *os.File, on bool) error {
	fd := int(f.Fd())
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return fmt.Errorf("FS_IOC_GETFLAGS: %w", err)
	}
	want := flags &^ fsImmutableFL
	if on {
		want |= fsImmutableFL
	}
	if want == flags {
		return nil
	}
	if err := unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(want)); err != nil {
		return fmt.Errorf("FS_IOC_SETFLAGS: %w", err)
	}
	return nil
}
