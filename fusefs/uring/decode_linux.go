package uring

import (
	"bytes"
	"fmt"
	"runtime/debug"
	"syscall"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FUSE opcodes (include/uapi/linux/fuse.h).
const (
	opLookup        = 1
	opGetattr       = 3
	opSetattr       = 4
	opReadlink      = 5
	opSymlink       = 6
	opMknod         = 8
	opMkdir         = 9
	opUnlink        = 10
	opRmdir         = 11
	opRename        = 12
	opLink          = 13
	opOpen          = 14
	opRead          = 15
	opWrite         = 16
	opStatfs        = 17
	opRelease       = 18
	opFsync         = 20
	opSetxattr      = 21
	opGetxattr      = 22
	opListxattr     = 23
	opRemovexattr   = 24
	opFlush         = 25
	opOpendir       = 27
	opReaddir       = 28
	opReleasedir    = 29
	opFsyncdir      = 30
	opGetlk         = 31
	opSetlk         = 32
	opSetlkw        = 33
	opAccess        = 34
	opCreate        = 35
	opDestroy       = 38
	opIoctl         = 39
	opFallocate     = 43
	opReaddirplus   = 44
	opRename2       = 45
	opLseek         = 46
	opCopyFileRange = 47
	opTmpfile       = 51
	opStatx         = 52
)

// cstr returns the NUL-terminated string at the start of b, and the rest.
func cstr(b []byte) (string, []byte, bool) {
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", nil, false
	}
	return string(b[:i]), b[i+1:], true
}

// outAt returns buf's head as a zeroed T.
func outAt[T any](buf []byte) (*T, int) {
	var z T
	n := int(unsafe.Sizeof(z))
	clear(buf[:n])
	return (*T)(unsafe.Pointer(&buf[0])), n
}

// LocalServer is a file system that can try some requests (localOps) on
// local data alone, so that a ring thread never waits for a remote: Local
// returns a view of it that answers them as the file system does, or
// EAGAIN for one that needs data only a remote has, having changed
// nothing. The ring then hands the request to a goroutine that serves it
// with the file system itself (a file system's own EAGAIN is answered by
// that call all the same).
type LocalServer interface {
	Local() fuse.RawFileSystem
}

// localOps are the opcodes a ring thread serves through LocalServer's
// view: those whose file system may need a remote's data (a read; the
// copy an open of a passthrough route makes; the stored chunk a write, a
// truncate or the flush behind an fsync of a file or a directory merges
// into). None of them answers EAGAIN of its own (SETLK does: it is not
// one).
var localOps = [...]bool{opSetattr: true, opOpen: true, opRead: true, opWrite: true, opFsync: true, opFsyncdir: true}

// offRing is the status of a handler on the ring thread whose request
// must be served by a goroutine instead; it writes nothing, so the
// request is served again from the start.
const offRing fuse.Status = -1

// serve answers the request in e, whose payload holds n bytes, writing the
// reply into e's buffers. On the ring thread (inline), it reports false,
// having written nothing, for a request that must go to a goroutine.
func (s *Server) serve(e *entry, n uint32, inline bool) bool {
	in := unsafe.Pointer(&e.in[0])
	h := (*fuse.InHeader)(in)
	data := e.payload[:min(int(n), len(e.payload))]
	if ext := int(h.TotalExtlen) * 8; ext <= len(data) {
		data = data[:len(data)-ext]
	}
	size, st := s.dispatch(h, request{h: h, in: in, data: data, out: e.payload, fs: s.fs, inline: inline})
	if st == offRing {
		if s.debug {
			s.log("fuse ring request off the ring", "op", h.Opcode, "node", h.NodeId, "unique", h.Unique, "queue", e.qid)
		}
		return false
	}
	if s.debug {
		s.log("fuse ring request", "op", h.Opcode, "node", h.NodeId, "unique", h.Unique, "queue", e.qid, "in", n, "out", size, "status", st)
	}
	if !st.Ok() {
		size = 0
	}
	oh := (*fuse.OutHeader)(unsafe.Pointer(&e.hdr[hdrInOut]))
	*oh = fuse.OutHeader{Length: uint32(outHeaderSize + size), Status: -int32(st), Unique: h.Unique}
	*(*uint32)(unsafe.Pointer(&e.hdr[hdrEntInOut+16])) = uint32(size)
	return true
}

// dispatch calls the file system for one request, as go-fuse's opcode
// table does for /dev/fuse, and returns the size of the reply written at
// the start of r.out. r.data and r.out are the same buffer: a handler
// reads all of data before it writes out. A handler that panics is
// answered EIO, as go-fuse answers it over /dev/fuse: on the ring thread,
// or on a goroutine of its, the panic would end the process and every
// mount with it.
func (s *Server) dispatch(h *fuse.InHeader, r request) (size int, st fuse.Status) {
	defer func() {
		if p := recover(); p != nil {
			s.log("fuse ring request panicked; answered EIO", "op", h.Opcode, "node", h.NodeId, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			size, st = 0, fuse.EIO
		}
	}()
	if h.NodeId == pollHackInode {
		return pollHackReply(h.Opcode, r.out)
	}
	if int(h.Opcode) >= len(handlers) || handlers[h.Opcode] == nil {
		return 0, fuse.ENOSYS
	}
	local := r.inline && s.local != nil && int(h.Opcode) < len(localOps) && localOps[h.Opcode]
	if local {
		r.fs = s.local
	}
	size, st = handlers[h.Opcode](s, r)
	if local && st == fuse.Status(syscall.EAGAIN) {
		return 0, offRing
	}
	return size, st
}

// request is one request as its handler sees it: the header, the fixed
// input struct at in, the rest of the payload and the reply buffer, the
// file system to serve it with (the server's, or its local view on the
// ring thread: dispatch), and whether it is served on the ring thread. A
// handler whose file system answers EAGAIN writes nothing into out: the
// request may be served again from the start.
type request struct {
	h      *fuse.InHeader
	in     unsafe.Pointer
	data   []byte
	out    []byte
	fs     fuse.RawFileSystem
	inline bool
}

// name is the request's one NUL-terminated name.
func (r request) name() (string, bool) {
	n, _, ok := cstr(r.data)
	return n, ok
}

// names are the request's two NUL-terminated names.
func (r request) names() (string, string, bool) {
	a, rest, ok := cstr(r.data)
	if !ok {
		return "", "", false
	}
	b, _, ok := cstr(rest)
	return a, b, ok
}

// reply runs call with a zeroed T at the start of out and returns its size.
func reply[T any](out []byte, call func(*T) fuse.Status) (int, fuse.Status) {
	o, sz := outAt[T](out)
	return sz, call(o)
}

// named runs call with the request's name, or answers EINVAL without one.
func named(r request, call func(string) (int, fuse.Status)) (int, fuse.Status) {
	n, ok := r.name()
	if !ok {
		return 0, fuse.EINVAL
	}
	return call(n)
}

// noReply wraps a call whose reply is its status alone.
func noReply(st fuse.Status) (int, fuse.Status) { return 0, st }

type handler func(s *Server, r request) (int, fuse.Status)

// handlers are the handlers by opcode; a missing one answers ENOSYS.
// No handler has a cancel channel (nil): an INTERRUPT is answered ENOSYS
// (Server.devRequest).
var handlers = [...]handler{
	opLookup: func(s *Server, r request) (int, fuse.Status) {
		return named(r, func(n string) (int, fuse.Status) {
			if r.h.NodeId == fuse.FUSE_ROOT_ID && n == pollHackName {
				return pollHackReply(r.h.Opcode, r.out)
			}
			return reply(r.out, func(o *fuse.EntryOut) fuse.Status { return s.fs.Lookup(nil, r.h, n, o) })
		})
	},
	opGetattr: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.AttrOut) fuse.Status { return s.fs.GetAttr(nil, (*fuse.GetAttrIn)(r.in), o) })
	},
	opSetattr: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.AttrOut) fuse.Status { return r.fs.SetAttr(nil, (*fuse.SetAttrIn)(r.in), o) })
	},
	opReadlink: func(s *Server, r request) (int, fuse.Status) {
		b, st := s.fs.Readlink(nil, r.h)
		return copy(r.out, b), st
	},
	opSymlink: func(s *Server, r request) (int, fuse.Status) {
		link, target, ok := r.names()
		if !ok {
			return 0, fuse.EINVAL
		}
		return reply(r.out, func(o *fuse.EntryOut) fuse.Status { return s.fs.Symlink(nil, r.h, target, link, o) })
	},
	opMknod: func(s *Server, r request) (int, fuse.Status) {
		return named(r, func(n string) (int, fuse.Status) {
			return reply(r.out, func(o *fuse.EntryOut) fuse.Status { return s.fs.Mknod(nil, (*fuse.MknodIn)(r.in), n, o) })
		})
	},
	opMkdir: func(s *Server, r request) (int, fuse.Status) {
		return named(r, func(n string) (int, fuse.Status) {
			return reply(r.out, func(o *fuse.EntryOut) fuse.Status { return s.fs.Mkdir(nil, (*fuse.MkdirIn)(r.in), n, o) })
		})
	},
	opLink: func(s *Server, r request) (int, fuse.Status) {
		return named(r, func(n string) (int, fuse.Status) {
			return reply(r.out, func(o *fuse.EntryOut) fuse.Status { return s.fs.Link(nil, (*fuse.LinkIn)(r.in), n, o) })
		})
	},
	opCreate: func(s *Server, r request) (int, fuse.Status) {
		return named(r, func(n string) (int, fuse.Status) {
			return reply(r.out, func(o *fuse.CreateOut) fuse.Status { return s.fs.Create(nil, (*fuse.CreateIn)(r.in), n, o) })
		})
	},
	opTmpfile: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.CreateOut) fuse.Status { return s.fs.Tmpfile(nil, (*fuse.CreateIn)(r.in), o) })
	},
	opUnlink: func(s *Server, r request) (int, fuse.Status) {
		return named(r, func(n string) (int, fuse.Status) { return noReply(s.fs.Unlink(nil, r.h, n)) })
	},
	opRmdir: func(s *Server, r request) (int, fuse.Status) {
		return named(r, func(n string) (int, fuse.Status) { return noReply(s.fs.Rmdir(nil, r.h, n)) })
	},
	opRemovexattr: func(s *Server, r request) (int, fuse.Status) {
		return named(r, func(n string) (int, fuse.Status) { return noReply(s.fs.RemoveXAttr(nil, r.h, n)) })
	},
	opRename:  doRename,
	opRename2: doRename,
	opOpen: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.OpenOut) fuse.Status { return r.fs.Open(nil, (*fuse.OpenIn)(r.in), o) })
	},
	opOpendir: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.OpenOut) fuse.Status { return s.fs.OpenDir(nil, (*fuse.OpenIn)(r.in), o) })
	},
	opRead:  doRead,
	opWrite: doWrite,
	opStatfs: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.StatfsOut) fuse.Status { return s.fs.StatFs(nil, r.h, o) })
	},
	opRelease: func(s *Server, r request) (int, fuse.Status) {
		s.fs.Release(nil, (*fuse.ReleaseIn)(r.in))
		return 0, fuse.OK
	},
	opReleasedir: func(s *Server, r request) (int, fuse.Status) {
		s.fs.ReleaseDir((*fuse.ReleaseIn)(r.in))
		return 0, fuse.OK
	},
	opFsync: func(s *Server, r request) (int, fuse.Status) {
		return noReply(r.fs.Fsync(nil, (*fuse.FsyncIn)(r.in)))
	},
	opFsyncdir: func(s *Server, r request) (int, fuse.Status) {
		return noReply(r.fs.FsyncDir(nil, (*fuse.FsyncIn)(r.in)))
	},
	opFlush: func(s *Server, r request) (int, fuse.Status) {
		return noReply(s.fs.Flush(nil, (*fuse.FlushIn)(r.in)))
	},
	opSetxattr: func(s *Server, r request) (int, fuse.Status) {
		attr, value, ok := cstr(r.data)
		if !ok {
			return 0, fuse.EINVAL
		}
		return noReply(s.fs.SetXAttr(nil, (*fuse.SetXAttrIn)(r.in), attr, value))
	},
	opGetxattr:    doXattr,
	opListxattr:   doXattr,
	opReaddir:     doReaddir,
	opReaddirplus: doReaddir,
	opGetlk: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.LkOut) fuse.Status { return s.fs.GetLk(nil, (*fuse.LkIn)(r.in), o) })
	},
	opSetlk: func(s *Server, r request) (int, fuse.Status) {
		return noReply(s.fs.SetLk(nil, (*fuse.LkIn)(r.in)))
	},
	opSetlkw: func(s *Server, r request) (int, fuse.Status) {
		return noReply(s.fs.SetLkw(nil, (*fuse.LkIn)(r.in)))
	},
	opAccess: func(s *Server, r request) (int, fuse.Status) {
		return noReply(s.fs.Access(nil, (*fuse.AccessIn)(r.in)))
	},
	opFallocate: func(s *Server, r request) (int, fuse.Status) {
		return noReply(s.fs.Fallocate(nil, (*fuse.FallocateIn)(r.in)))
	},
	opLseek: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.LseekOut) fuse.Status { return s.fs.Lseek(nil, (*fuse.LseekIn)(r.in), o) })
	},
	opCopyFileRange: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.WriteOut) (st fuse.Status) {
			o.Size, st = s.fs.CopyFileRange(nil, (*fuse.CopyFileRangeIn)(r.in))
			return st
		})
	},
	opStatx: func(s *Server, r request) (int, fuse.Status) {
		return reply(r.out, func(o *fuse.StatxOut) fuse.Status { return s.fs.Statx(nil, (*fuse.StatxIn)(r.in), o) })
	},
	// No node of homefs answers an ioctl (go-fuse's bridge says ENOTTY).
	opIoctl:   func(*Server, request) (int, fuse.Status) { return 0, fuse.Status(syscall.ENOTTY) },
	opDestroy: func(*Server, request) (int, fuse.Status) { return 0, fuse.OK },
}

func doRename(s *Server, r request) (int, fuse.Status) {
	from, to, ok := r.names()
	if !ok {
		return 0, fuse.EINVAL
	}
	return noReply(s.fs.Rename(nil, (*fuse.RenameIn)(r.in), from, to))
}

func doRead(s *Server, r request) (int, fuse.Status) {
	rin := (*fuse.ReadIn)(r.in)
	buf := r.out[:min(int(rin.Size), len(r.out))]
	res, st := r.fs.Read(nil, rin, buf)
	if res == nil {
		return 0, st
	}
	defer res.Done()
	if !st.Ok() {
		return 0, st
	}
	b, st := res.Bytes(buf)
	return copy(buf, b), st
}

func doWrite(s *Server, r request) (int, fuse.Status) {
	win := (*fuse.WriteIn)(r.in)
	if int(win.Size) > len(r.data) {
		return 0, fuse.EINVAL
	}
	// The data is in out: reply after the write, and only for one that
	// took place (an EAGAIN is served again, data and all).
	written, st := r.fs.Write(nil, win, r.data[:win.Size])
	if !st.Ok() {
		return 0, st
	}
	o, sz := outAt[fuse.WriteOut](r.out)
	o.Size = written
	return sz, st
}

func doXattr(s *Server, r request) (int, fuse.Status) {
	return s.xattr(r.h, r.in, r.data, r.out)
}

func doReaddir(s *Server, r request) (int, fuse.Status) {
	rin := (*fuse.ReadIn)(r.in)
	l := fuse.NewDirEntryList(r.out[:min(int(rin.Size), len(r.out))], rin.Offset)
	var st fuse.Status
	if r.h.Opcode == opReaddir {
		st = s.fs.ReadDir(nil, rin, l)
	} else {
		st = s.fs.ReadDirPlus(nil, rin, l)
	}
	return len(l.Bytes()), st
}

// Go's runtime registers every file it opens with epoll, which makes the
// kernel send POLL and wait with the thread's P held; if all Ps wait so, no
// thread is left to answer. go-fuse forestalls it at mount time by polling
// a file of its own, pollHackName, so that the kernel learns from an
// ENOSYS to send POLL no more; a mount served by the rings does the same
// (pollHack), and the rings answer for that file as go-fuse does.
const (
	pollHackName  = ".go-fuse-epoll-hack"
	pollHackInode = ^uint64(0)
	opPoll        = 40
)

func pollHackReply(op uint32, out []byte) (int, fuse.Status) {
	attr := fuse.Attr{Ino: pollHackInode, Mode: syscall.S_IFREG | 0o644, Nlink: 1}
	switch op {
	case opLookup:
		o, sz := outAt[fuse.EntryOut](out)
		o.NodeId, o.Attr = pollHackInode, attr
		return sz, fuse.OK
	case opOpen:
		o, sz := outAt[fuse.OpenOut](out)
		o.Fh = pollHackInode
		return sz, fuse.OK
	case opGetattr, opSetattr:
		o, sz := outAt[fuse.AttrOut](out)
		o.Attr = attr
		return sz, fuse.OK
	case opGetxattr:
		return 0, fuse.ENODATA
	case opPoll:
		return 0, fuse.ENOSYS
	case opAccess, opFlush, opRelease:
		return 0, fuse.OK
	}
	return 0, fuse.ERANGE
}

// pollHack makes the kernel send the mount's first POLL, answered ENOSYS.
func pollHack(dir string) error {
	fd, err := syscall.Open(dir+"/"+pollHackName, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	_, err = unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLPRI | unix.POLLOUT}}, 0)
	return err
}

// xattr answers GETXATTR and LISTXATTR the way go-fuse does: a request for
// size 0 asks only for the size.
func (s *Server) xattr(h *fuse.InHeader, in unsafe.Pointer, data, out []byte) (int, fuse.Status) {
	gin := (*fuse.GetXAttrIn)(in)
	dest := out[:min(int(gin.Size), len(out))]
	var n uint32
	var st fuse.Status
	if h.Opcode == opGetxattr {
		attr, _, ok := cstr(data)
		if !ok {
			return 0, fuse.EINVAL
		}
		n, st = s.fs.GetXAttr(nil, h, attr, dest)
	} else {
		n, st = s.fs.ListXAttr(nil, h, dest)
	}
	if gin.Size == 0 {
		if st == fuse.ERANGE {
			st = fuse.OK
		}
		o, sz := outAt[fuse.GetXAttrOut](out)
		o.Size = n
		return sz, st
	}
	return int(min(n, uint32(len(dest)))), st
}
