package uring

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/homefs/homefs/internal/fusectl"
	"github.com/homefs/homefs/internal/mountinfo"
)

// Mount mounts dir itself (go-fuse cannot hand over the /dev/fuse
// descriptor the rings need) and serves raw at it: go-fuse answers INIT,
// the process's rings serve the rest, FORGET and INTERRUPT included. opts are
// go-fuse's, MaxWrite set (it sizes the ring buffers); log gets what goes
// wrong on the rings (every request too with opts.Debug). An error leaves
// nothing mounted (a ring that failed while the mount registered aborts
// and detaches it). A REGISTER the kernel refuses is no error: the mount
// is then served over /dev/fuse alone (Active says which).
func Mount(dir string, raw fuse.RawFileSystem, opts *fuse.MountOptions, log *slog.Logger) (*fuse.Server, *Server, error) {
	mo := *opts
	us, err := newServer(raw, mo.MaxWrite, func(msg string, args ...any) { log.Warn(msg, args...) })
	if err != nil {
		return nil, nil, err
	}
	us.debug, us.dir, us.forget = mo.Debug, dir, !mo.RememberInodes
	started := false
	defer func() {
		if !started {
			us.close()
		}
	}()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return nil, nil, err
	}
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	// As go-fuse's direct mount does.
	data := []string{
		fmt.Sprintf("fd=%d", fd),
		fmt.Sprintf("rootmode=%o", st.Mode&syscall.S_IFMT),
		fmt.Sprintf("user_id=%d", os.Geteuid()),
		fmt.Sprintf("group_id=%d", os.Getegid()),
		fmt.Sprintf("max_read=%d", mo.MaxWrite),
	}
	var flags uintptr = syscall.MS_NOSUID | syscall.MS_NODEV
	if mo.DirectMountFlags != 0 {
		flags = mo.DirectMountFlags // as go-fuse's direct mount takes them (mountFlags)
	}
	for _, o := range mo.Options {
		// The kernel takes these as flags, not as options.
		switch o {
		case "dev":
			flags &^= syscall.MS_NODEV
		case "nodev", "nosuid":
		default:
			data = append(data, o)
		}
	}
	if mo.AllowOther {
		data = append(data, "allow_other")
	}
	if err := syscall.Mount(mo.FsName, dir, "fuse."+mo.Name, flags, strings.Join(data, ",")); err != nil {
		syscall.Close(fd)
		return nil, nil, fmt.Errorf("mount: %w", err)
	}
	// A failed ring aborts the connection (ring.fail); the mount table
	// names it, without a request to the mount.
	fstype := "fuse." + mo.Name
	if us.conn, err = mountinfo.ConnAt(dir, func(e mountinfo.Entry) bool { return e.FSType == fstype }); err != nil {
		log.Warn("fuse connection unknown: a failed ring cannot abort it", "mount", dir, "err", err)
	}
	// go-fuse serves a descriptor it is given as /dev/fd/N. NewServer
	// answers INIT; its Serve, which reads /dev/fuse on a thread of its
	// own, runs only if the rings do not serve the connection, or once it
	// has ended (Server.finish).
	mo.DirectMount, mo.DirectMountStrict = false, false
	mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
	server, err := fuse.NewServer(raw, fmt.Sprintf("/dev/fd/%d", fd), &mo)
	if err != nil {
		_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		syscall.Close(fd)
		return nil, nil, err
	}
	us.fuse = server
	// Registration waits for go-fuse to answer INIT. A REGISTER the kernel
	// refuses turns the connection back to /dev/fuse, which go-fuse then
	// serves: the mount works either way.
	started = true
	if err := us.start(fd); err != nil {
		if errors.Is(err, errRingFailed) {
			// Aborted: nothing serves it. The caller mounts again.
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
			return nil, nil, err
		}
		log.Warn("FUSE over io_uring refused; serving over /dev/fuse", "mount", dir, "err", err)
	}
	if err := pollHack(dir); err != nil {
		log.Warn("poll hack", "mount", dir, "err", err)
	}
	return server, us, nil
}

// RingThreads is how many ring threads the process runs while it serves
// a mount over io_uring, however many mounts: one a possible CPU, at most
// maxThreads.
func RingThreads() (int, error) {
	n, err := possibleCPUs()
	return min(n, maxThreads), err
}

// Active reports whether the kernel sends the connection's requests
// through the rings: every entry was registered.
func (s *Server) Active() bool { return s.active.Load() }

// Unmount unmounts the mount made by Mount; it does nothing once it has
// succeeded (as go-fuse's Server.Unmount, which cannot unmount a mount it
// did not make).
func (s *Server) Unmount() error {
	s.unmountMu.Lock()
	defer s.unmountMu.Unlock()
	if s.unmounted {
		return nil
	}
	if err := syscall.Unmount(s.dir, 0); err != nil {
		return err
	}
	s.unmounted = true
	return nil
}

// abort ends the connection after a ring failed (ring.fail): its
// requests on that ring's CPUs would otherwise wait for ever.
func (s *Server) abort(cause error) {
	if err := fusectl.Abort(s.conn); err != nil {
		s.log("fuse ring failed and the connection could not be aborted: requests from its CPUs wait until the mount is detached", "mount", s.dir, "ring_err", cause, "err", err)
		return
	}
	s.log("fuse connection aborted: a ring serving it failed", "mount", s.dir, "ring_err", cause)
}

// Served counts the requests answered through the rings.
func (s *Server) Served() int64 {
	var n int64
	for i := range s.served {
		n += s.served[i].n.Load()
	}
	return n
}

// Wait waits for the connection to end and the rings to let go of the
// mount: every command they had out for it has come back. The ring
// threads themselves end with the last mount.
func (s *Server) Wait() { <-s.ended }
