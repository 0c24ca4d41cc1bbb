package fusefs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// The gate ignores INTERRUPT (see doc.go, Interrupts) and times each
// request for the engine's Observer (observe.go).

func (g *rawGate) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) (status fuse.Status) {
	t := g.begin()
	return g.end(OpLookup, t, g.RawFileSystem.Lookup(nil, header, name, out))
}

func (g *rawGate) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) (code fuse.Status) {
	t := g.begin()
	return g.end(OpGetAttr, t, g.RawFileSystem.GetAttr(nil, input, out))
}

func (g *rawGate) SetAttr(cancel <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) (code fuse.Status) {
	t := g.begin()
	return g.end(OpSetAttr, t, g.RawFileSystem.SetAttr(nil, input, out))
}

func (g *rawGate) Mknod(cancel <-chan struct{}, input *fuse.MknodIn, name string, out *fuse.EntryOut) (code fuse.Status) {
	t := g.begin()
	in := *input
	in.Mode = foldUmask(in.Mode, in.Umask)
	return g.end(OpMknod, t, g.RawFileSystem.Mknod(nil, &in, name, out))
}

func (g *rawGate) Mkdir(cancel <-chan struct{}, input *fuse.MkdirIn, name string, out *fuse.EntryOut) (code fuse.Status) {
	t := g.begin()
	in := *input
	in.Mode = foldUmask(in.Mode, in.Umask)
	return g.end(OpMkdir, t, g.RawFileSystem.Mkdir(nil, &in, name, out))
}

func (g *rawGate) Unlink(cancel <-chan struct{}, header *fuse.InHeader, name string) (code fuse.Status) {
	t := g.begin()
	return g.end(OpUnlink, t, g.RawFileSystem.Unlink(nil, header, name))
}

func (g *rawGate) Rmdir(cancel <-chan struct{}, header *fuse.InHeader, name string) (code fuse.Status) {
	t := g.begin()
	return g.end(OpRmdir, t, g.RawFileSystem.Rmdir(nil, header, name))
}

func (g *rawGate) Rename(cancel <-chan struct{}, input *fuse.RenameIn, oldName string, newName string) (code fuse.Status) {
	t := g.begin()
	return g.end(OpRename, t, g.RawFileSystem.Rename(nil, input, oldName, newName))
}

func (g *rawGate) Link(cancel <-chan struct{}, input *fuse.LinkIn, filename string, out *fuse.EntryOut) (code fuse.Status) {
	t := g.begin()
	return g.end(OpLink, t, g.RawFileSystem.Link(nil, input, filename, out))
}

func (g *rawGate) Symlink(cancel <-chan struct{}, header *fuse.InHeader, pointedTo string, linkName string, out *fuse.EntryOut) (code fuse.Status) {
	t := g.begin()
	return g.end(OpSymlink, t, g.RawFileSystem.Symlink(nil, header, pointedTo, linkName, out))
}

func (g *rawGate) Readlink(cancel <-chan struct{}, header *fuse.InHeader) (out []byte, code fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.Readlink(nil, header)
	return r, g.end(OpReadlink, t, st)
}

func (g *rawGate) Access(cancel <-chan struct{}, input *fuse.AccessIn) (code fuse.Status) {
	t := g.begin()
	return g.end(OpAccess, t, g.RawFileSystem.Access(nil, input))
}

func (g *rawGate) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (sz uint32, code fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.GetXAttr(nil, header, attr, dest)
	return r, g.end(OpGetXAttr, t, st)
}

func (g *rawGate) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.ListXAttr(nil, header, dest)
	return r, g.end(OpListXAttr, t, st)
}

func (g *rawGate) SetXAttr(cancel <-chan struct{}, input *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	t := g.begin()
	in := *input
	if g.killSGID(input) {
		in.Flags |= xattrKillSGID
	}
	return g.end(OpSetXAttr, t, g.RawFileSystem.SetXAttr(nil, &in, attr, data))
}

func (g *rawGate) RemoveXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string) (code fuse.Status) {
	t := g.begin()
	return g.end(OpRemoveXAttr, t, g.RawFileSystem.RemoveXAttr(nil, header, attr))
}

func (g *rawGate) Create(cancel <-chan struct{}, input *fuse.CreateIn, name string, out *fuse.CreateOut) (code fuse.Status) {
	t := g.begin()
	in := *input
	in.Mode = foldUmask(in.Mode, in.Umask)
	return g.end(OpCreate, t, g.RawFileSystem.Create(nil, &in, name, out))
}

func (g *rawGate) Tmpfile(cancel <-chan struct{}, input *fuse.CreateIn, out *fuse.CreateOut) (code fuse.Status) {
	t := g.begin()
	in := *input
	in.Mode = foldUmask(in.Mode, in.Umask)
	return g.end(OpTmpfile, t, g.RawFileSystem.Tmpfile(nil, &in, out))
}

func (g *rawGate) Open(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) (status fuse.Status) {
	t := g.begin()
	return g.end(OpOpen, t, g.RawFileSystem.Open(nil, input, out))
}

func (g *rawGate) Read(cancel <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.Read(readMode(input, false), input, buf)
	return r, g.end(OpRead, t, st)
}

func (g *rawGate) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	t := g.begin()
	return g.end(OpLseek, t, g.RawFileSystem.Lseek(nil, in, out))
}

func (g *rawGate) Write(cancel <-chan struct{}, input *fuse.WriteIn, data []byte) (written uint32, code fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.Write(writeMode(input, false), input, data)
	return r, g.end(OpWrite, t, st)
}

func (g *rawGate) Writev(cancel <-chan struct{}, input *fuse.WriteIn, data [][]byte) (written uint32, code fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.Writev(writeMode(input, false), input, data)
	return r, g.end(OpWrite, t, st)
}

func (g *rawGate) CopyFileRange(cancel <-chan struct{}, input *fuse.CopyFileRangeIn) (written uint32, code fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.CopyFileRange(nil, input)
	return r, g.end(OpCopyFileRange, t, st)
}

func (g *rawGate) Flush(cancel <-chan struct{}, input *fuse.FlushIn) fuse.Status {
	t := g.begin()
	return g.end(OpFlush, t, g.RawFileSystem.Flush(nil, input))
}

func (g *rawGate) Fsync(cancel <-chan struct{}, input *fuse.FsyncIn) (code fuse.Status) {
	t := g.begin()
	return g.end(OpFsync, t, g.RawFileSystem.Fsync(nil, input))
}

func (g *rawGate) Fallocate(cancel <-chan struct{}, input *fuse.FallocateIn) (code fuse.Status) {
	t := g.begin()
	return g.end(OpFallocate, t, g.RawFileSystem.Fallocate(nil, input))
}

func (g *rawGate) FsyncDir(cancel <-chan struct{}, input *fuse.FsyncIn) (code fuse.Status) {
	t := g.begin()
	return g.end(OpFsyncDir, t, g.RawFileSystem.FsyncDir(nil, input))
}

func (g *rawGate) StatFs(cancel <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) (code fuse.Status) {
	t := g.begin()
	return g.end(OpStatFs, t, g.RawFileSystem.StatFs(nil, input, out))
}

func (g *rawGate) Statx(cancel <-chan struct{}, input *fuse.StatxIn, out *fuse.StatxOut) (code fuse.Status) {
	t := g.begin()
	return g.end(OpStatx, t, g.RawFileSystem.Statx(nil, input, out))
}

// localGate is the gate as a ring thread sees it (uring.LocalServer): it
// serves a READ, OPEN, WRITE, SETATTR, FSYNC or FSYNCDIR from local data alone (modeLocal,
// storeCtx), and one that needs a remote's data answers EAGAIN, having
// changed nothing (cas.ErrNotLocal, as toErrno maps it); the ring then
// serves it again off the ring with the gate itself. Such an attempt is
// not timed: the gate times the request when it serves it.
type localGate struct{ *rawGate }

// Local returns the gate's local view (uring.LocalServer).
func (g *rawGate) Local() fuse.RawFileSystem { return localGate{g} }

// endLocal is end for a request of localGate, which leaves an EAGAIN
// untimed.
func (g localGate) endLocal(op Op, t time.Time, st fuse.Status) fuse.Status {
	if st == fuse.Status(syscall.EAGAIN) {
		return st
	}
	return g.end(op, t, st)
}

func (g localGate) Read(_ <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.Read(readMode(input, true), input, buf)
	return r, g.endLocal(OpRead, t, st)
}

func (g localGate) Open(_ <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	t := g.begin()
	return g.endLocal(OpOpen, t, g.RawFileSystem.Open(callMode(false, true), input, out))
}

func (g localGate) Write(_ <-chan struct{}, input *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	t := g.begin()
	r, st := g.RawFileSystem.Write(writeMode(input, true), input, data)
	return r, g.endLocal(OpWrite, t, st)
}

func (g localGate) Fsync(_ <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	t := g.begin()
	return g.endLocal(OpFsync, t, g.RawFileSystem.Fsync(callMode(false, true), input))
}

func (g localGate) FsyncDir(_ <-chan struct{}, input *fuse.FsyncIn) fuse.Status {
	t := g.begin()
	return g.endLocal(OpFsyncDir, t, g.RawFileSystem.FsyncDir(callMode(false, true), input))
}

func (g localGate) SetAttr(_ <-chan struct{}, input *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	t := g.begin()
	return g.endLocal(OpSetAttr, t, g.RawFileSystem.SetAttr(callMode(false, true), input, out))
}
