package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Export writes the tree at root to w as a PAX tar stream: directories,
// files, symlinks, fifos, device nodes and hard links (a later name of a
// linked node is a TypeLink to its first), with modes, owners, nanosecond
// times and xattrs. Sockets are left out, as GNU tar leaves them out
// ("socket ignored"): tar has no type for them, and a socket file means
// nothing without the process that listened on it. Every chunk is read through g, which verifies it; a damaged
// chunk, or one that breaks the chunk-length rule (manifest.CheckChunk),
// stops the export with an error wrapping cas.ErrCorrupt.
func Export(ctx context.Context, g cas.Getter, root cas.Ref, w io.Writer, progress Progress) error {
	x := &exporter{
		ctx:       ctx,
		g:         g,
		tw:        tar.NewWriter(w),
		firstName: make(map[uint64]string),
		progress:  progress,
	}
	if err := x.writeRoot(root); err != nil {
		return err
	}
	if err := manifest.Walk(ctx, g, root, x.entry); err != nil {
		return err
	}
	return x.tw.Close()
}

// exporter holds what Export carries from one entry to the next.
type exporter struct {
	ctx            context.Context
	g              cas.Getter
	tw             *tar.Writer
	firstName      map[uint64]string // LinkID → first path written
	entries, bytes int64
	progress       Progress
}

// writeRoot writes the root's own attributes, when its tree holds them, as
// those of "./", as tar writes the directory it archives.
func (x *exporter) writeRoot(root cas.Ref) error {
	top, err := manifest.GetTree(x.ctx, x.g, root)
	if err != nil {
		return fmt.Errorf("archive: root: %w", err)
	}
	a := top.Self
	if a == nil {
		return nil
	}
	hdr := &tar.Header{Name: "./", Typeflag: tar.TypeDir, Mode: int64(a.Mode), Uid: int(a.UID), Gid: int(a.GID),
		ModTime: time.Unix(0, a.MtimeNs), ChangeTime: time.Unix(0, a.CtimeNs), Format: tar.FormatPAX,
		PAXRecords: paxXattrs(a.Xattrs)}
	if err := x.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive: ./: %w", err)
	}
	return nil
}

// entry writes the entry at p (a manifest.Walk callback).
func (x *exporter) entry(p string, e *manifest.Entry) error {
	if e.Kind == manifest.KindSocket {
		return nil
	}
	hdr, err := entryHeader(p, e)
	if err != nil {
		return err
	}
	linked := false
	if e.LinkID != 0 && e.Kind != manifest.KindDir {
		if first, ok := x.firstName[e.LinkID]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			linked = true
		} else {
			x.firstName[e.LinkID] = p
		}
	}
	if err := x.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("archive: %s: %w", p, err)
	}
	x.entries++
	if e.Kind == manifest.KindFile && !linked {
		n, err := writeContent(x.ctx, x.g, e, x.tw)
		x.bytes += n
		if err != nil {
			return fmt.Errorf("archive: %s: %w", p, err)
		}
	}
	if x.progress != nil {
		x.progress(x.entries, x.bytes)
	}
	return nil
}

// entryHeader is the tar header of the entry at p, of any kind but a
// socket, as its first name.
func entryHeader(p string, e *manifest.Entry) (*tar.Header, error) {
	hdr := &tar.Header{
		Name:       p,
		Mode:       int64(e.Mode & 0o7777),
		Uid:        int(e.UID),
		Gid:        int(e.GID),
		ModTime:    time.Unix(0, e.MtimeNs),
		ChangeTime: time.Unix(0, e.CtimeNs),
		Format:     tar.FormatPAX,
		PAXRecords: paxXattrs(e.Xattrs),
	}
	switch e.Kind {
	case manifest.KindFifo:
		hdr.Typeflag = tar.TypeFifo
	case manifest.KindCharDev, manifest.KindBlockDev:
		hdr.Typeflag = tar.TypeChar
		if e.Kind == manifest.KindBlockDev {
			hdr.Typeflag = tar.TypeBlock
		}
		hdr.Devmajor, hdr.Devminor = int64(unix.Major(uint64(e.Rdev))), int64(unix.Minor(uint64(e.Rdev)))
	case manifest.KindDir:
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case manifest.KindSymlink:
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.Target
	case manifest.KindFile:
		hdr.Typeflag = tar.TypeReg
		hdr.Size = e.Size
	default:
		return nil, fmt.Errorf("archive: %s: %w: kind %v", p, cas.ErrCorrupt, e.Kind)
	}
	return hdr, nil
}

// paxXattrs is the PAX records that carry xs; nil for none.
func paxXattrs(xs []manifest.Xattr) map[string]string {
	var recs map[string]string
	for _, x := range xs {
		if recs == nil {
			recs = make(map[string]string)
		}
		recs[xattrPrefix+x.Name] = string(x.Value)
	}
	return recs
}

// writeContent writes a file's bytes, chunk by chunk, holes as zeros.
func writeContent(ctx context.Context, g cas.Getter, e *manifest.Entry, w io.Writer) (int64, error) {
	cl, err := manifest.LoadChunkList(ctx, g, e)
	if err != nil {
		return 0, err
	}
	var written int64
	for i := 0; i < cl.Len(); i++ {
		var data []byte
		if ref := cl.At(i); ref.IsZero() {
			data = make([]byte, manifest.ChunkLen(e.Size, i))
		} else {
			if data, err = g.Get(ctx, ref); err != nil {
				return written, fmt.Errorf("chunk %d: %w", i, err)
			}
			// A chunk that breaks the chunk-length rule is damage: its
			// bytes cannot be placed without guessing.
			if err := manifest.CheckChunk(e.Size, i, len(data)); err != nil {
				return written, fmt.Errorf("%w: %w", cas.ErrCorrupt, err)
			}
		}
		n, err := w.Write(data)
		written += int64(n)
		if err != nil {
			return written, err
		}
	}
	return written, nil
}
