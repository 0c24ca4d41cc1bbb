package fusefs

import (
	"context"
	"errors"
	"net"
	"net/url"
	"syscall"

	"github.com/homefs/homefs/cas"
)

// toErrno is the one place where errors become kernel errnos. POSIX
// outcomes travel as syscall.Errno and pass through; cancellation becomes
// EINTR; a store that refuses data on a full disk (cas.ErrNoSpace) is
// ENOSPC, as a full ext4 says; a chunk that a request tried on local
// data alone found only a remote has (cas.ErrNotLocal) is EAGAIN, which
// the ring takes back (localGate); everything else (corrupt or missing
// chunks, store failures, a remote that refused or timed out, whatever
// errno its network error carries) is logged with the path and becomes
// EIO, so that wrong bytes are never served.
func (m *Mount) toErrno(op string, f *fnode, err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var (
		errno  syscall.Errno
		opErr  *net.OpError
		dnsErr *net.DNSError
		urlErr *url.Error
	)
	switch {
	case errors.As(err, &opErr), errors.As(err, &dnsErr), errors.As(err, &urlErr):
		// A remote's failure (ECONNREFUSED, a timeout) is not an outcome of
		// the file operation, whatever errno it carries: a filesystem
		// answers EIO.
	case errors.As(err, &errno):
		return errno
	case errors.Is(err, context.Canceled):
		return syscall.EINTR
	}
	if errors.Is(err, cas.ErrNotLocal) {
		// Only a request the ring tried on local data alone meets it; the
		// ring serves it again, remote allowed (localGate).
		return syscall.EAGAIN
	}
	if errors.Is(err, cas.ErrNoSpace) {
		// The store logs when it starts and stops refusing.
		m.log.Debug("no space", "op", op, "mount", m.dir, "err", err)
		return syscall.ENOSPC
	}
	path := ""
	if f != nil {
		path = f.Path(nil)
	}
	switch {
	case errors.Is(err, cas.ErrCorrupt):
		m.log.Error("corrupt data: refusing to serve it", "op", op, "mount", m.dir, "path", path, "err", err)
	case errors.Is(err, cas.ErrNotFound):
		m.log.Error("missing data", "op", op, "mount", m.dir, "path", path, "err", err)
	default:
		m.log.Error("operation failed", "op", op, "mount", m.dir, "path", path, "err", err)
	}
	return syscall.EIO
}
