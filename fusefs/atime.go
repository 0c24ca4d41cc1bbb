package fusefs

// Access times, as relatime keeps them: see doc.go, Access times.

import (
	"context"
	"fmt"
	"slices"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// atimeRefresh is how old an atime relatime refreshes on a read anyway.
const atimeRefresh = 24 * 60 * 60 * 1e9

// readMode returns the cancel channel for a READ (see callModes):
// O_NOATIME as fcntl left it, and local.
func readMode(in *fuse.ReadIn, local bool) <-chan struct{} {
	return callMode(in.Flags&syscall.O_NOATIME != 0, local)
}

// needsAtime is relatime's rule: whether a read at now sets the atime.
func needsAtime(atime, mtime, ctime, now int64) bool {
	return atime <= mtime || atime <= ctime || now-atime >= atimeRefresh
}

// accessed records a read of n through m, and reports whether it set the
// atime.
func (m *Mount) accessed(n *node) bool {
	if m.noAtime || m.sess.readOnly {
		return false
	}
	t := now()
	n.mu.Lock()
	set := needsAtime(n.atime, n.mtime, n.ctime, t)
	if set {
		n.atime = t
	}
	n.mu.Unlock()
	if set {
		m.sess.markAtime(n)
	}
	return set
}

// openedToRead adjusts an open for reading with flags, answered with
// keep (its FOPEN_* flags) and handle h, to the atime its reads may set,
// and returns the flags to answer: a passthrough reader readies the
// backing file to show its reads, and a reader whose read would set the
// atime does not keep the kernel's pages, so that the read reaches the
// daemon. Called with no lock held.
func (f *fnode) openedToRead(ctx context.Context, flags, keep uint32, h any) uint32 {
	if flags&syscall.O_ACCMODE == syscall.O_WRONLY || flags&syscall.O_NOATIME != 0 || f.m.noAtime || f.sess().readOnly {
		return keep
	}
	n := f.n.Load()
	if _, pt := h.(ptHandle); pt {
		if err := f.sess().watchReads(ctx, n); err != nil {
			f.m.log.Warn("atime of a passthrough reader", "mount", f.m.dir, "err", err)
		}
		return keep
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if keep&fuse.FOPEN_KEEP_CACHE != 0 && needsAtime(n.atime, n.mtime, n.ctime, now()) {
		keep &^= fuse.FOPEN_KEEP_CACHE
	}
	return keep
}

// watchReads readies n's backing file to show a passthrough reader's
// reads: it starts the watch of the file's atime, and where a read would
// move the node's atime but not the file's (the node's attributes changed
// since its last read, not its content), it sets the file's atime back to
// its mtime, which relatime then moves on the next read.
func (s *Session) watchReads(ctx context.Context, n *node) error {
	// Writes passed through so far come before the read (wroteAt).
	if err := s.observeBacked(ctx, n); err != nil {
		return err
	}
	s.freeze.RLock() // a fingerprint changes: not in the middle of a flush
	defer s.freeze.RUnlock()
	n.mu.Lock()
	defer n.mu.Unlock()
	b := n.data.backing
	var st unix.Stat_t
	if b == nil || unix.Fstat(int(b.f.Fd()), &st) != nil {
		return nil
	}
	if b.watch {
		n.sawReads(&st) // another reader's, since the last look
	} else {
		b.watch, b.atime = true, st.Atim.Nano()
	}
	t := now()
	if needsAtime(n.atime, n.mtime, n.ctime, t) && !needsAtime(st.Atim.Nano(), st.Mtim.Nano(), st.Ctim.Nano(), t) {
		return b.rearm(&st)
	}
	return nil
}

// rearm sets b's atime back to its mtime (st is a fresh fstat of it). That
// moves its ctime, so the fingerprint it was absorbed at moves with it,
// unless a write came in between (its mtime moved too: then the write is
// for the next absorb). Called with the node's mu held.
func (b *backing) rearm(st *unix.Stat_t) error {
	before := fingerprint{size: st.Size, mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
	ts := []unix.Timespec{st.Mtim, {Nsec: unix.UTIME_OMIT}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, procPath(b.f), ts, 0); err != nil {
		return fmt.Errorf("set back the atime of a backing file: %w", err)
	}
	var now unix.Stat_t
	if err := unix.Fstat(int(b.f.Fd()), &now); err != nil {
		return fmt.Errorf("backing file: %w", err)
	}
	after := fingerprint{size: now.Size, mtime: now.Mtim.Nano(), ctime: now.Ctim.Nano()}
	if b.absorbed == before && after.size == before.size && after.mtime == before.mtime {
		b.absorbed = after
	}
	b.atime = now.Atim.Nano()
	return nil
}

// sawReads applies the passthrough reads that st, a fresh fstat of n's
// backing file, shows: its atime moved since the last look. The read is
// dated when the backing file's atime says, and after the node's last
// change, which it followed. Called with n.mu held.
func (n *node) sawReads(st *unix.Stat_t) {
	b := n.data.backing
	if b == nil || !b.watch || st.Atim.Nano() == b.atime {
		return
	}
	read := st.Atim.Nano()
	b.atime = read
	if needsAtime(n.atime, n.mtime, n.ctime, read) {
		n.atime = max(read, n.mtime+1, n.ctime+1)
		n.sess.markAtime(n)
	}
}

// sawReadsNow is sawReads with an fstat of its own, for a backing file
// about to go. Called with n.mu held.
func (n *node) sawReadsNow() {
	var st unix.Stat_t
	if b := n.data.backing; b != nil && b.watch && unix.Fstat(int(b.f.Fd()), &st) == nil {
		n.sawReads(&st)
	}
}

// wroteAt dates a passthrough write that the daemon sees now, with the
// backing file's mtime: never before n's atime (its create, or its last
// read), since whatever sets an atime looks at the backing file first, so
// the write came after it. The kernel dates the backing file by its
// coarse clock, up to a tick behind the daemon's: a write right after a
// create or a read would otherwise look older than them, and relatime
// would not count it. An atime in the future (set by utimensat) is no
// floor. Called with n.mu held.
func (n *node) wroteAt(mtime int64) {
	if a := n.atime; a > mtime && a <= now() {
		mtime = a
	}
	n.mtime, n.ctime = mtime, mtime
}

// markAtime records that n's atime changed: stored by the next flush,
// which this alone does not make due.
func (s *Session) markAtime(n *node) {
	s.dirtyMu.Lock()
	s.atimes[n] = struct{}{}
	s.dirtyMu.Unlock()
}

// mountFlags makes a mount whose reads set no atime (a noatime or
// read-only one) noatime in the mount table too: a mount flag when the
// daemon mounts itself, since mount(2) takes it only so (the FUSE module
// refuses it as an option), and an option fusermount3 takes otherwise.
func mountFlags(o *fuse.MountOptions, noAtime bool) {
	switch {
	case !noAtime:
	case o.DirectMount:
		o.DirectMountFlags = syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_NOATIME
	default:
		o.Options = append(slices.Clip(o.Options), "noatime")
	}
}
