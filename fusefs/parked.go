package fusefs

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Parked read copies. A read copy (Read copies, staged.go) lasts as long
// as its daemon; a daemon that starts again would read the file from the
// store, verifying and copying every chunk through the FUSE connection,
// which on two cores runs at half the speed of the disk under it. So a
// session that closes cleanly (the final flush made everything durable)
// *parks* each big staged file or read copy that no handle uses, that
// still holds what its node took from it and whose node holds nothing
// unstored: it renames the file into the store directory's parked
// directory, under its content's key (contentKey: the size and every
// chunk's ref, hashed). Nothing else is kept about it, and nothing needs
// to be: a later daemon trusts no parked byte it has not checked.
//
// A reader's open that the daemon would serve, the node's first open in
// its mount, of a big file whose content is stored as it is (no chunk
// written since the last flush) and whose key names a parked copy, while
// no writer has it open in any mount, *adopts* the copy, in two steps.
// First, before the open takes any lock (claimParked), it claims the
// copy: renames it out of the parked directory into the session's
// backing directory, under a name of its own, so that no prune or park
// can touch it, and reads it whole, on every core, checking each chunk
// against the node's ref (a hole against zeros). Then the open, under its
// locks (installClaim), makes it the node's read copy, of kind kept, if
// the node still holds that content and has no copy and no writer, and
// passes through to it; otherwise the copy goes back to the parked
// directory (unclaim). From then on it is any read copy. A copy that
// fails the check is removed, and the daemon serves the open; one that
// could not be read for want of a resource (descriptors, memory) goes
// back. The check is the verification a read from the store makes, done
// once for the whole file, at the disk's speed, before the kernel reads
// it from the page cache the check filled (1 GiB after a restart and
// drop_caches: docs/BENCHMARKS.md, Reads); with no lock held, a flush or
// any other request of the session does not wait for it. On a ring
// thread it would hold every request of its CPU's queue back, so there
// the open fails with cas.ErrNotLocal before it claims anything, and is
// served again off the ring (localGate).
//
// The key is the content's, not the session's or the file's: a fork, or
// another session with the same file, adopts the copy as well (the first
// open to take it has it). Parked copies take at most parkedMax bytes,
// the most recently parked kept first, and none while the store
// directory's filesystem has less than keptFreeMin of itself free
// (pruned at each park, at the engine's start, and by the flusher when
// the disk has filled: dropIfFull). A copy larger than parkedMax is not
// parked.
const parkedDirName = "readcopies"

// parkedMax bounds the bytes of parked copies in a store directory.
const parkedMax = keptMax

// parkedCopies is the index of a store directory's parked copies, by key.
// A nil *parkedCopies (an engine with no store directory) holds none.
type parkedCopies struct {
	dir string
	log *slog.Logger

	mu sync.Mutex
	// keys holds each copy's size, by key; sizes counts the copies of
	// each size, which an open looks up before it computes a key.
	keys  map[string]int64 // GUARDED_BY(mu)
	sizes map[int64]int    // GUARDED_BY(mu)
}

// openParked returns the parked copies under storeDir (none if it is
// empty), having removed what is not one and pruned the rest.
func openParked(storeDir string, log *slog.Logger) *parkedCopies {
	if storeDir == "" {
		return nil
	}
	p := &parkedCopies{dir: filepath.Join(storeDir, parkedDirName), log: log, keys: make(map[string]int64), sizes: make(map[int64]int)}
	p.prune()
	return p
}

// isKey reports whether name is a key (contentKey's form).
func isKey(name string) bool {
	b, err := hex.DecodeString(name)
	return err == nil && len(b) == sha256.Size
}

// contentKey is the key of a file's content of size bytes whose chunks
// are refs (manifest.ChunkCount(size) of them, a zero ref a hole).
func contentKey(size int64, refs []cas.Ref) string {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(size))
	h.Write(b[:])
	for i := range refs {
		h.Write(refs[i][:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// hasSize reports whether p holds a copy of size bytes: the cheap test an
// open makes before it computes a key.
func (p *parkedCopies) hasSize(size int64) bool {
	if p == nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sizes[size] > 0
}

// has reports whether p holds a copy of key.
func (p *parkedCopies) has(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.keys[key]
	return ok
}

// add lists the copy of key, of size bytes. Called with p.mu held.
func (p *parkedCopies) add(key string, size int64) {
	if _, ok := p.keys[key]; !ok {
		p.keys[key] = size
		p.sizes[size]++
	}
}

// drop unlists the copy of key and reports whether p listed it. Called
// with p.mu held.
func (p *parkedCopies) drop(key string) bool {
	size, ok := p.keys[key]
	if ok {
		delete(p.keys, key)
		if p.sizes[size]--; p.sizes[size] <= 0 {
			delete(p.sizes, size)
		}
	}
	return ok
}

// take unlists the copy of key and reports whether p listed it: the
// caller then has the file.
func (p *parkedCopies) take(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.drop(key)
}

// remove removes the copy of key, which p no longer lists.
func (p *parkedCopies) remove(key string) {
	if err := os.Remove(filepath.Join(p.dir, key)); err != nil && !errors.Is(err, os.ErrNotExist) {
		p.log.Warn("remove a parked read copy", "err", err)
	}
}

// putBack lists again the copy of key, of size bytes, that take took
// and left as it was.
func (p *parkedCopies) putBack(key string, size int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.add(key, size)
}

// park renames path, a read copy of size bytes of the content of key,
// into p. It reports whether it did; where a copy of key is there
// already, that one stays, and path is left to the caller.
func (p *parkedCopies) park(path, key string, size int64) bool {
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		p.log.Warn("park a read copy", "err", err)
		return false
	}
	err := unix.Renameat2(unix.AT_FDCWD, path, unix.AT_FDCWD, filepath.Join(p.dir, key), unix.RENAME_NOREPLACE)
	if err != nil {
		if !errors.Is(err, unix.EEXIST) {
			p.log.Warn("park a read copy", "err", err)
		}
		return false
	}
	p.putBack(key, size)
	return true
}

// prune lists p's directory again: it removes what is not a copy, every
// copy if the filesystem has no room for them (keptFreeMin), and the
// copies parked longest ago past parkedMax bytes. A copy another session
// takes or parks meanwhile may be listed wrongly until the next prune: a
// take of one gone fails its open, and one unlisted waits.
func (p *parkedCopies) prune() {
	entries, err := os.ReadDir(p.dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			p.log.Warn("list parked read copies", "err", err)
		}
		return
	}
	room := hasRoom(p.dir)
	type copyInfo struct {
		key    string
		size   int64
		parked int64 // ctime: the rename that parked it
	}
	var copies []copyInfo
	for _, e := range entries {
		var st unix.Stat_t
		if !isKey(e.Name()) || !e.Type().IsRegular() || unix.Stat(filepath.Join(p.dir, e.Name()), &st) != nil {
			p.remove(e.Name())
			continue
		}
		copies = append(copies, copyInfo{e.Name(), st.Size, st.Ctim.Nano()})
	}
	slices.SortFunc(copies, func(a, b copyInfo) int { return cmp.Compare(b.parked, a.parked) }) // newest first
	var total int64
	var drop []string
	p.mu.Lock()
	clear(p.keys)
	clear(p.sizes)
	for _, c := range copies {
		if !room || total+c.size > parkedMax {
			drop = append(drop, c.key)
			continue
		}
		total += c.size
		p.add(c.key, c.size)
	}
	p.mu.Unlock()
	// Unlinked with p.mu free: a ring thread's open asks p (hasSize).
	for _, key := range drop {
		p.remove(key)
	}
}

// dropIfFull removes every parked copy while the store directory's
// filesystem has no room for them (keptFreeMin): a disk that fills while
// the daemon runs gets back what they hold, as the read copies give theirs
// (dropKeptIfFull).
func (p *parkedCopies) dropIfFull() {
	if p == nil {
		return
	}
	p.mu.Lock()
	some := len(p.keys) > 0
	p.mu.Unlock()
	if some && !hasRoom(p.dir) {
		p.prune()
	}
}

// storedRefs returns the refs of n's chunks, manifest.ChunkCount of its
// size (a zero ref a hole), when its content is what they hold: no chunk
// was written since the last flush. Called with n.mu held.
func (n *node) storedRefs(ctx context.Context) ([]cas.Ref, bool, error) {
	d := n.data
	if len(d.dirty) > 0 {
		return nil, false, nil
	}
	if err := n.loadChunks(ctx); err != nil {
		return nil, false, err
	}
	refs := make([]cas.Ref, manifest.ChunkCount(d.size))
	for i := range min(len(refs), d.chunks.Len()) {
		refs[i] = d.chunks.At(i)
	}
	return refs, true, nil
}

// passable reports whether a passthrough open of n may be had at all: a
// file of a writable session with a backing directory, with no setuid,
// setgid or capability (the kernel would not drop them on a
// passed-through write). Called with n.mu held.
func (n *node) passable() bool {
	if n.kind != manifest.KindFile || n.sess.readOnly || n.sess.backingDir == "" {
		return false
	}
	if n.mode&(syscall.S_ISUID|syscall.S_ISGID) != 0 {
		return false
	}
	_, caps := n.xattrs[capabilityXattr]
	return !caps
}

// parkedClaim is a parked copy an open claimed and checked for its node
// (claimParked): renamed into the session's backing directory under name,
// open as f, holding the content of key, size bytes. installClaim makes
// it the node's read copy (used); otherwise unclaim parks it again.
type parkedClaim struct {
	f    *os.File
	name string
	key  string
	size int64
	used bool
}

// claimParked claims and checks the parked copy of n's content for the
// reader's first open of n in f's mount, with flags, where the daemon
// would serve it (parkedCopies); it returns nil where there is none to
// adopt. Under cas.LocalOnly it fails with cas.ErrNotLocal, having
// claimed nothing, where it would claim a copy. Called with no lock held:
// the check reads the whole file.
func (f *fnode) claimParked(ctx context.Context, flags uint32) (*parkedClaim, error) {
	s, n := f.sess(), f.n.Load()
	if s.parked == nil || s.readOnly || n.kind != manifest.KindFile || flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, nil
	}
	f.openMu.Lock()
	first := f.opens == 0
	f.openMu.Unlock()
	if !first {
		return nil, nil
	}
	n.mu.Lock()
	key, refs := n.parkedKey(ctx)
	size := n.data.size
	n.mu.Unlock()
	if key == "" {
		return nil, nil
	}
	if cas.IsLocalOnly(ctx) {
		return nil, fmt.Errorf("check a parked read copy: %w", cas.ErrNotLocal)
	}
	if !s.keepRoom() {
		return nil, nil
	}
	c := s.claim(key, size)
	if c == nil {
		return nil, nil
	}
	if hook := s.afterClaim.Load(); hook != nil {
		(*hook)()
	}
	if err := verifyCopy(ctx, c.f, size, refs); err != nil {
		switch {
		case ctx.Err() != nil:
			// The reader gave up (an interrupted open): the copy is
			// as it was.
			s.unclaim(c)
			return nil, ctx.Err()
		case copyDamaged(err):
			s.log.Warn("parked read copy refused", "session", s.name, "inode", n.ino, "err", err)
			c.f.Close()
			s.removeBackingNames([]string{c.name})
		default:
			s.log.Warn("check a parked read copy", "session", s.name, "err", err)
			s.unclaim(c)
		}
		return nil, nil
	}
	return c, nil
}

// parkedKey returns the key of n's content, and its chunks' refs, if a
// reader's open may adopt a parked copy of it and one is parked; "" if
// not. Called with n.mu held.
func (n *node) parkedKey(ctx context.Context) (string, []cas.Ref) {
	s, d := n.sess, n.data
	if d.backing != nil || d.size < absorbHoldMin || d.size > parkedMax || !s.parked.hasSize(d.size) ||
		!n.passable() || !s.stagingOK() || s.writing.has(n) {
		return "", nil
	}
	// A chunk list only a remote has is no reason to wait for the remote
	// with n.mu held, and a parked copy of it is unlikely.
	key, refs := n.localKey(ctx)
	if key == "" || !s.parked.has(key) {
		return "", nil
	}
	return key, refs
}

// installClaim makes c, a claimed and checked parked copy, n's read copy
// if n still holds c's content and has no backing file and no writer in
// any mount; it reports whether it did. Called as openRoute is, with
// n.mu held.
func (n *node) installClaim(ctx context.Context, c *parkedClaim) bool {
	s, d := n.sess, n.data
	// A session closing (closeBackings closes its workers before it
	// walks the nodes under their mu) takes no new backing file: a check
	// may outlast the wait for an aborted connection.
	if d.backing != nil || d.size != c.size || s.writing.has(n) || !n.passable() || s.workers.isClosed() {
		return false
	}
	if key, _ := n.localKey(ctx); key != c.key {
		return false
	}
	fp, err := fingerprintOf(c.f)
	if err != nil {
		return false
	}
	b := &backing{f: c.f, name: c.name, kind: backingKept, ingested: d.size, mtime: fp.mtime, absorbed: fp}
	b.stage.size = d.size
	b.keep(s.keepEpoch.Load(), time.Now())
	d.backing = b
	s.backed.add(n)
	c.used = true
	return true
}

// claim takes the parked copy of key, of size bytes, out of the parked
// directory into s's backing directory under a name of this daemon's,
// and opens it there; nil if it is gone (taken, pruned) or cannot be
// had. Once renamed, the file is the claim's alone: a copy parked under
// the same key later is another file.
func (s *Session) claim(key string, size int64) *parkedClaim {
	p := s.parked
	if !p.take(key) {
		return nil
	}
	from := filepath.Join(p.dir, key)
	name, err := s.nameBacking(func(path string) error {
		return unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
	})
	if err != nil {
		if !errors.Is(err, unix.ENOENT) {
			s.log.Warn("claim a parked read copy", "err", err)
		}
		return nil
	}
	c := &parkedClaim{name: name, key: key, size: size}
	// O_NOATIME, as makeBackingFile: the daemon's reads leave the atime
	// to the passthrough readers'.
	path := filepath.Join(s.backingDir, name)
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if err != nil {
		s.log.Warn("open a parked read copy", "err", err)
		s.unpark(c)
		return nil
	}
	c.f = os.NewFile(uintptr(fd), path)
	return c
}

// unclaim parks c, a claim no open used, again.
func (s *Session) unclaim(c *parkedClaim) {
	c.f.Close()
	s.unpark(c)
}

// unpark renames c's file back into the parked directory under its key,
// or removes it where a copy of that key was parked meanwhile or the
// rename fails.
func (s *Session) unpark(c *parkedClaim) {
	if !s.parked.park(filepath.Join(s.backingDir, c.name), c.key, c.size) {
		s.removeBackingNames([]string{c.name})
	}
}

// copyDamaged reports whether err, verifyCopy's, says the copy is not
// the content (or cannot be read back: EIO), rather than that the check
// lacked a resource.
func copyDamaged(err error) bool {
	return errors.Is(err, cas.ErrCorrupt) || errors.Is(err, unix.EIO) || errors.Is(err, errShortCopy)
}

// parkCopy parks n's backing file b if it is a big staged file or read
// copy that no handle uses and that holds what n holds, all of it stored
// (parkedCopies); it reports whether it did. Called, for a session
// closing cleanly, with n.mu held.
func (s *Session) parkCopy(n *node, b *backing) bool {
	if s.parked == nil || !b.isStaged() || b.opens > 0 || b.stage.size < absorbHoldMin || b.stage.size > parkedMax || !n.ingestedAsIs() ||
		n.data.size != b.stage.size || !n.passable() {
		return false
	}
	key, _ := n.localKey(context.Background())
	if key == "" {
		return false
	}
	return s.parked.park(filepath.Join(s.backingDir, b.name), key, n.data.size)
}

// localKey returns the key of n's content and its chunks' refs, read from
// local data alone (a remote is never waited for with n.mu held), when n
// holds what they hold (storedRefs); "" otherwise. Called with n.mu held.
func (n *node) localKey(ctx context.Context) (string, []cas.Ref) {
	refs, ok, err := n.storedRefs(cas.LocalOnly(ctx))
	if err != nil || !ok {
		return "", nil
	}
	return contentKey(n.data.size, refs), refs
}

// verifyCopy checks that f holds exactly the content of size bytes whose
// chunks are refs (a zero ref a hole): every chunk read and hashed, each
// core reading its part of the file through a descriptor of its own, so
// that the kernel's read-ahead sees each part read in order.
func verifyCopy(ctx context.Context, f *os.File, size int64, refs []cas.Ref) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("read copy: %w", err)
	}
	if st.Size != size {
		return fmt.Errorf("read copy: %d bytes, the file %d: %w", st.Size, size, cas.ErrCorrupt)
	}
	workers := min(runtime.GOMAXPROCS(0), max(1, len(refs)/16))
	g, ctx := errgroup.WithContext(ctx)
	for w := range workers {
		from, to := len(refs)*w/workers, len(refs)*(w+1)/workers
		g.Go(func() error { return verifyPart(ctx, f, size, refs, from, to) })
	}
	return g.Wait()
}

// verifyRun is how many chunks verifyPart reads at once (1 MiB): 1 GiB
// checked 4% faster than a chunk a read. Asking the kernel for the runs
// ahead (FADV_WILLNEED) made it 30% slower.
const verifyRun = 16

// verifyPart checks chunks [from, to) of f for verifyCopy, a run of
// chunks a read.
func verifyPart(ctx context.Context, f *os.File, size int64, refs []cas.Ref, from, to int) error {
	fd, err := unix.Open(procPath(f), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOATIME, 0)
	if err != nil {
		return fmt.Errorf("read copy: %w", err)
	}
	defer unix.Close(fd)
	const run = verifyRun * manifest.ChunkSize
	_ = unix.Fadvise(fd, 0, 0, unix.FADV_SEQUENTIAL)
	buf := make([]byte, run)
	for first := from; first < to; first += verifyRun {
		if err := ctx.Err(); err != nil {
			return err
		}
		off := int64(first) * manifest.ChunkSize
		end := min(size, int64(min(to, first+verifyRun))*manifest.ChunkSize)
		p := buf[:end-off]
		if err := preadFull(fd, p, off); err != nil {
			return fmt.Errorf("read copy: %w", err)
		}
		for i := first; i < min(to, first+verifyRun); i++ {
			c := p[:chunkLen(size, i)]
			p = p[len(c):]
			if refs[i].IsZero() && !isZero(c) || !refs[i].IsZero() && cas.Sum(c) != refs[i] {
				return fmt.Errorf("read copy: chunk %d is not %s: %w", i, refs[i].Short(), cas.ErrCorrupt)
			}
		}
	}
	return nil
}

// errShortCopy: a copy ended before the size it has (truncated meanwhile).
var errShortCopy = errors.New("the file is shorter than its size")

// preadFull reads len(p) bytes at off from fd.
func preadFull(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		k, err := unix.Pread(fd, p, off)
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return err
		case k == 0:
			return fmt.Errorf("at %d: %w", off, errShortCopy)
		}
		p, off = p[k:], off+int64(k)
	}
	return nil
}
