package fusefs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Observer is told what the engine serves, for metrics (Options.Observer).
// Its methods run on the request path of every mount: they must be cheap,
// never block and never call into a mount.
type Observer interface {
	// Request reports one kernel request of kind op, answered with errno
	// (0 for success) d after it reached the gate.
	Request(op Op, errno syscall.Errno, d time.Duration)
	// Flush reports one flush that stored a session's changes (or failed
	// to): periodic, fsync, sync or shutdown. Flushes that found nothing
	// to store are not reported.
	Flush(d time.Duration, err error)
}

// Op is the kind of a kernel request as the gate serves it.
type Op uint8

// The requests the gate times. WRITE counts both go-fuse's Write and
// Writev; FORGET and lock requests are not timed (FORGET has no answer,
// and locks are the kernel's).
const (
	OpLookup Op = iota
	OpGetAttr
	OpSetAttr
	OpMknod
	OpMkdir
	OpUnlink
	OpRmdir
	OpRename
	OpLink
	OpSymlink
	OpReadlink
	OpAccess
	OpGetXAttr
	OpListXAttr
	OpSetXAttr
	OpRemoveXAttr
	OpCreate
	OpTmpfile
	OpOpen
	OpRead
	OpLseek
	OpWrite
	OpCopyFileRange
	OpFlush
	OpFsync
	OpFallocate
	OpFsyncDir
	OpStatFs
	OpStatx
	OpRelease
	OpOpenDir
	OpReadDir
	OpReadDirPlus
	OpReleaseDir
	// NumOps is the number of kinds: Op values are below it.
	NumOps
)

var opNames = [NumOps]string{
	"lookup", "getattr", "setattr", "mknod", "mkdir", "unlink", "rmdir", "rename", "link", "symlink",
	"readlink", "access", "getxattr", "listxattr", "setxattr", "removexattr", "create", "tmpfile",
	"open", "read", "lseek", "write", "copy_file_range", "flush", "fsync", "fallocate", "fsyncdir",
	"statfs", "statx", "release", "opendir", "readdir", "readdirplus", "releasedir",
}

// String is the request's name as the kernel's opcode says it, lower case.
func (op Op) String() string {
	if op < NumOps {
		return opNames[op]
	}
	return "unknown"
}

// begin starts timing a request; without an observer it reads no clock.
func (g *rawGate) begin() time.Time {
	if g.obs == nil {
		return time.Time{}
	}
	return time.Now()
}

// end reports a request begun at t and passes its status through.
func (g *rawGate) end(op Op, t time.Time, st fuse.Status) fuse.Status {
	if g.obs != nil {
		g.obs.Request(op, syscall.Errno(st), time.Since(t))
	}
	return st
}
