package fusefs

// Directory listings and no-opendir: see doc.go, Directory listings.

import (
	"container/list"
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// OpendirHandle returns a listing handle (doc.go, Directory listings).
func (f *fnode) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	var fuseFlags uint32
	if !f.m.shortCache.Load() {
		fuseFlags = fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
	}
	return &dirHandle{f: f}, fuseFlags, 0
}

// dirHandle is an open directory stream.
type dirHandle struct {
	f       *fnode
	mu      sync.Mutex
	id      uint32          // the snapshot's id in f.m.streams; GUARDED_BY(mu)
	entries []fuse.DirEntry // nil until listed; GUARDED_BY(mu)
	next    int             // index of the next entry; GUARDED_BY(mu)
}

var (
	_ fs.FileReaddirenter = (*dirHandle)(nil)
	_ fs.FileSeekdirer    = (*dirHandle)(nil)
)

// cookie is the directory offset after the first k entries of snapshot id.
// Ids are below 2^31, so that an offset is never negative.
func cookie(id uint32, k int) uint64 { return uint64(id)<<32 | uint64(k) }

func splitCookie(off uint64) (id uint32, k int) { return uint32(off >> 32), int(uint32(off)) }

// list takes a fresh snapshot of the directory. REQUIRES d.mu
func (d *dirHandle) list(ctx context.Context) syscall.Errno {
	n := d.f.n.Load()
	names, err := d.f.sess().list(ctx, n)
	if err != nil {
		return d.f.m.toErrno("readdir", d.f, err)
	}
	// "." and ".." come first, as ext4 lists them (ls -a, getdents64).
	// A mount's root is its own parent: what is above it is not ours
	// to name, and the kernel takes no inode from a dirent anyway.
	self := d.f.StableAttr().Ino
	parent := self
	if _, p := d.f.Parent(); p != nil {
		parent = p.StableAttr().Ino
	}
	d.entries = make([]fuse.DirEntry, 2, len(names)+2)
	d.entries[0] = fuse.DirEntry{Name: ".", Ino: self, Mode: syscall.S_IFDIR}
	d.entries[1] = fuse.DirEntry{Name: "..", Ino: parent, Mode: syscall.S_IFDIR}
	for _, e := range names {
		d.entries = append(d.entries, fuse.DirEntry{Name: e.Name, Ino: e.Ino, Mode: typeBits(e.Kind)})
	}
	d.id = d.f.m.streams.add(n.ino, d.entries)
	d.next = 0
	d.f.m.accessed(n)
	return 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.entries == nil {
		if errno := d.list(ctx); errno != 0 {
			return nil, errno
		}
	}
	if d.next >= len(d.entries) {
		return nil, 0
	}
	e := d.entries[d.next]
	d.next++
	e.Off = cookie(d.id, d.next)
	return &e, 0
}

// Seekdir moves the stream to off: 0 rewinds (the next read lists the
// directory anew), any other offset is a cookie this mount gave out.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == 0 {
		d.entries, d.next = nil, 0
		return 0
	}
	id, k := splitCookie(off)
	if d.entries == nil || d.id != id {
		if entries, ok := d.f.m.streams.get(id, d.f.n.Load().ino); ok {
			d.entries, d.id = entries, id
		} else {
			// The snapshot was evicted (or the cookie is not ours):
			// continue in a fresh one at the same position, the best
			// that can be done without it.
			if errno := d.list(ctx); errno != 0 {
				return errno
			}
			k = min(k, len(d.entries))
		}
	}
	if k > len(d.entries) {
		return syscall.EINVAL
	}
	d.next = k
	return 0
}

// dirStreams keeps the most recently used listing snapshots of a mount, at
// most streamsMax of them and streamEntriesMax entries in all.
type dirStreams struct {
	mu      sync.Mutex
	lastID  uint32                   // GUARDED_BY(mu)
	byID    map[uint32]*list.Element // of *dirStream; GUARDED_BY(mu)
	lru     list.List                // front: most recently used; GUARDED_BY(mu)
	entries int                      // GUARDED_BY(mu)
}

type dirStream struct {
	id      uint32
	dir     uint64 // the directory's ino
	entries []fuse.DirEntry
}

const (
	streamsMax       = 4096
	streamEntriesMax = 1 << 18
)

// add keeps a new snapshot of directory dir and returns its id.
func (s *dirStreams) add(dir uint64, entries []fuse.DirEntry) uint32 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byID == nil {
		s.byID = map[uint32]*list.Element{}
	}
	for {
		s.lastID = (s.lastID + 1) & (1<<31 - 1)
		if _, used := s.byID[s.lastID]; s.lastID != 0 && !used {
			break
		}
	}
	st := &dirStream{id: s.lastID, dir: dir, entries: entries}
	s.byID[st.id] = s.lru.PushFront(st)
	s.entries += len(entries)
	for s.lru.Len() > 1 && (s.lru.Len() > streamsMax || s.entries > streamEntriesMax) {
		old := s.lru.Remove(s.lru.Back()).(*dirStream)
		delete(s.byID, old.id)
		s.entries -= len(old.entries)
	}
	return st.id
}

// get returns snapshot id if it is kept and is one of directory dir.
func (s *dirStreams) get(id uint32, dir uint64) ([]fuse.DirEntry, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	el, ok := s.byID[id]
	if !ok || el.Value.(*dirStream).dir != dir {
		return nil, false
	}
	s.lru.MoveToFront(el)
	return el.Value.(*dirStream).entries, true
}
