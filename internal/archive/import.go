package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/cas"
	"github.com/homefs/homefs/manifest"
)

// Store is what Import needs of a store.
type Store interface {
	cas.Putter
	cas.Batcher
}

// ImportResult describes an imported tree.
type ImportResult struct {
	Root     cas.Ref `json:"root"`
	Files    int64   `json:"files"`
	Dirs     int64   `json:"dirs"`
	Symlinks int64   `json:"symlinks"`
	Special  int64   `json:"special,omitempty"` // fifos and device nodes
	Bytes    int64   `json:"bytes"`
}

// batchPutter lets manifest helpers put into a batch.
type batchPutter struct{ b cas.Batch }

func (p batchPutter) Put(_ context.Context, data []byte) (cas.Ref, error) { return p.b.Put(data) }

// ImportOptions configure Import.
type ImportOptions struct {
	// Devices keeps character and block device nodes; without it an
	// archive holding one is refused (ErrUnsupported): a device node made
	// by an untrusted archive opens a device wherever a mount allows it.
	Devices  bool
	Progress Progress
	// BtimeNs is every entry's birth time, as extracting the archive on
	// ext4 gives each file the time it was made: the import's time; 0
	// leaves it unknown (and the same archive imports to the same root).
	BtimeNs int64
}

// Import stores the tree held by the tar stream r and returns its root.
// Fifos are kept; device nodes only with opts.Devices.
// Nothing is named: on error the chunks already put are unreferenced and
// the next gc removes them. The batch is committed durably before Import
// returns, so the root may be named at once.
func Import(ctx context.Context, st Store, r io.Reader, opts ImportOptions) (*ImportResult, error) {
	b := st.NewBatch()
	defer b.Discard()
	tail := &tailReader{r: r}
	im := &importer{
		ctx:   ctx,
		b:     b,
		put:   batchPutter{b},
		tr:    tar.NewReader(tail),
		opts:  opts,
		buf:   make([]byte, manifest.ChunkSize),
		files: make(map[string]manifest.Entry),
		links: linkGroups{group: make(map[string]int)},
		res:   &ImportResult{},
	}
	if err := im.readAll(tail); err != nil {
		return nil, err
	}
	im.links.number(im.files)
	root, err := manifest.BuildTree(ctx, im.put, im.files)
	if err != nil {
		if errors.Is(err, manifest.ErrInvalid) {
			return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
		}
		return nil, err
	}
	if err := b.Commit(ctx, true); err != nil {
		return nil, fmt.Errorf("archive: commit: %w", err)
	}
	im.res.Root = root
	return im.res, nil
}

// importer holds what Import builds while it reads the stream.
type importer struct {
	ctx   context.Context
	b     cas.Batch
	put   batchPutter
	tr    *tar.Reader
	opts  ImportOptions
	buf   []byte                    // one chunk of file content
	files map[string]manifest.Entry // tree path → entry, as BuildTree takes them
	links linkGroups
	res   *ImportResult
	// entries counts the headers read, global ones included.
	entries int64
}

// readAll reads every entry of the stream up to its end marker.
func (im *importer) readAll(tail *tailReader) error {
	for {
		if err := im.ctx.Err(); err != nil {
			return err
		}
		hdr, err := im.tr.Next()
		if err == io.EOF {
			if !tail.endMarker() {
				return fmt.Errorf("%w: after %d entries: the stream ends without the end-of-archive marker (truncated?)", ErrMalformed, im.entries)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: after %d entries: %v", ErrMalformed, im.entries, err)
		}
		im.entries++
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if err := im.entry(hdr); err != nil {
			return err
		}
	}
}

// entry checks and stores one entry.
func (im *importer) entry(hdr *tar.Header) error {
	p, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	// As Extract does, never go through a symlink.
	for d := path.Dir(p); p != "" && d != "."; d = path.Dir(d) {
		if up, ok := im.files[d]; ok && up.Kind == manifest.KindSymlink {
			return fmt.Errorf("%w: %q is below %q, a symlink", ErrUnsafe, hdr.Name, d)
		}
	}
	if err := checkSparse(hdr); err != nil {
		return err
	}
	e := headerEntry(hdr)
	e.BtimeNs = im.opts.BtimeNs
	switch hdr.Typeflag {
	case tar.TypeDir:
		e.Kind = manifest.KindDir
		if p == "" {
			// "./": the root's own attributes (BuildTree's files[""]).
			im.files[""] = e
			return nil
		}
		im.res.Dirs++
	case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
		err = im.file(p, hdr, &e)
	case tar.TypeSymlink:
		err = im.symlink(p, hdr, &e)
	case tar.TypeLink:
		return im.hardLink(p, hdr)
	case tar.TypeFifo, tar.TypeChar, tar.TypeBlock:
		err = im.special(p, hdr, &e)
	default:
		return fmt.Errorf("%w: %q has tar type %q", ErrUnsupported, hdr.Name, hdr.Typeflag)
	}
	if err != nil {
		return err
	}
	im.links.leave(p)
	im.files[p] = e
	if im.opts.Progress != nil {
		im.opts.Progress(im.entries, im.res.Bytes)
	}
	return nil
}

// headerEntry is the entry's attributes that every kind has.
func headerEntry(hdr *tar.Header) manifest.Entry {
	e := manifest.Entry{
		Mode:    uint32(hdr.Mode) & 0o7777,
		UID:     clampID(hdr.Uid),
		GID:     clampID(hdr.Gid),
		MtimeNs: hdr.ModTime.UnixNano(),
	}
	e.CtimeNs = e.MtimeNs
	if !hdr.ChangeTime.IsZero() {
		e.CtimeNs = hdr.ChangeTime.UnixNano()
	}
	e.Xattrs = xattrs(hdr.PAXRecords)
	return e
}

// file stores a regular file's content.
func (im *importer) file(p string, hdr *tar.Header, e *manifest.Entry) error {
	if p == "" {
		return fmt.Errorf("%w: a file named %q", ErrMalformed, hdr.Name)
	}
	if hdr.Size > MaxFileSize {
		return fmt.Errorf("%w: %q: %d bytes, over the %d GiB a homefs file holds", ErrUnsupported, hdr.Name, hdr.Size, MaxFileSize>>30)
	}
	e.Kind = manifest.KindFile
	n, err := storeContent(im.ctx, im.b, im.put, im.tr, im.buf, e)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if n != hdr.Size {
		return fmt.Errorf("%w: %s: %d of %d bytes", ErrMalformed, p, n, hdr.Size)
	}
	im.res.Files++
	im.res.Bytes += n
	return nil
}

func (im *importer) symlink(p string, hdr *tar.Header, e *manifest.Entry) error {
	if p == "" {
		return fmt.Errorf("%w: a symlink named %q", ErrMalformed, hdr.Name)
	}
	if err := checkTarget(p, hdr.Linkname); err != nil {
		return err
	}
	e.Kind = manifest.KindSymlink
	e.Target = hdr.Linkname
	e.Size = int64(len(hdr.Linkname))
	im.res.Symlinks++
	return nil
}

// hardLink gives p the entry of an earlier name. It reports no progress,
// as no content comes with it.
func (im *importer) hardLink(p string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link %q: %w", hdr.Name, err)
	}
	t, ok := im.files[target]
	if !ok || t.Kind == manifest.KindDir || p == "" {
		return fmt.Errorf("%w: hard link %q → %q: not an earlier non-directory of the archive", ErrUnsafe, hdr.Name, hdr.Linkname)
	}
	if p == target {
		return nil // a name linked to itself changes nothing
	}
	im.links.leave(p)
	im.links.join(target, p)
	im.files[p] = t
	switch t.Kind {
	case manifest.KindFile:
		im.res.Files++
	case manifest.KindSymlink:
		im.res.Symlinks++
	default:
		im.res.Special++
	}
	return nil
}

// special stores a fifo, or a device node when opts.Devices allows it.
func (im *importer) special(p string, hdr *tar.Header, e *manifest.Entry) error {
	if p == "" {
		return fmt.Errorf("%w: a special file named %q", ErrMalformed, hdr.Name)
	}
	e.Kind = manifest.KindFifo
	if hdr.Typeflag != tar.TypeFifo {
		if !im.opts.Devices {
			return fmt.Errorf("%w: %q is a device node (import with devices allowed to keep it)", ErrUnsupported, hdr.Name)
		}
		if hdr.Devmajor < 0 || hdr.Devmajor > 0xfff || hdr.Devminor < 0 || hdr.Devminor > 0xfffff {
			return fmt.Errorf("%w: %q: device %d:%d out of range", ErrMalformed, hdr.Name, hdr.Devmajor, hdr.Devminor)
		}
		e.Kind = manifest.KindCharDev
		if hdr.Typeflag == tar.TypeBlock {
			e.Kind = manifest.KindBlockDev
		}
		e.Rdev = uint32(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
	}
	im.res.Special++
	return nil
}

// linkGroups follows hard links through the stream. A hard link names the
// inode its target holds at that point of the stream: a group is the
// names of one inode, and a name leaves its group when a later entry
// replaces it, as when tar extracts.
type linkGroups struct {
	group  map[string]int // name → its group, while it names the group's inode
	groups [][]string     // the names of each group, in archive order
}

// leave takes p out of its group, if it is in one.
func (l *linkGroups) leave(p string) {
	if g, ok := l.group[p]; ok {
		l.groups[g] = slices.DeleteFunc(l.groups[g], func(n string) bool { return n == p })
		delete(l.group, p)
	}
}

// join puts p into target's group, which it starts if target has none.
func (l *linkGroups) join(target, p string) {
	g, ok := l.group[target]
	if !ok {
		g = len(l.groups)
		l.groups = append(l.groups, []string{target})
		l.group[target] = g
	}
	l.groups[g] = append(l.groups[g], p)
	l.group[p] = g
}

// number gives the names of each group still holding two or more one
// identity in files: they are one inode, numbered in archive order.
func (l *linkGroups) number(files map[string]manifest.Entry) {
	id := uint64(0)
	for _, names := range l.groups {
		if len(names) < 2 {
			continue
		}
		id++
		for _, n := range names {
			e := files[n]
			e.LinkID, e.Nlink = id, uint32(len(names))
			files[n] = e
		}
	}
}

// storeContent reads a file's content from r in chunks and fills e's
// size and chunk refs.
func storeContent(ctx context.Context, b cas.Batch, put batchPutter, r io.Reader, buf []byte, e *manifest.Entry) (int64, error) {
	cl := manifest.NewChunkList()
	var size int64
	for i := 0; ; i++ {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			var ref cas.Ref
			if !isZero(buf[:n]) {
				if ref, err = b.Put(buf[:n]); err != nil {
					return size, fmt.Errorf("archive: put chunk: %w", err)
				}
			}
			cl.Set(i, ref)
			size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return size, fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if err := ctx.Err(); err != nil {
			return size, err
		}
	}
	chunks, index, depth, err := cl.Store(ctx, put)
	if err != nil {
		return size, err
	}
	e.Size, e.Chunks, e.Index, e.Depth = size, chunks, index, depth
	return size, nil
}

// zeros is what isZero compares with: bytes.Equal is vectorised, where a
// loop over the bytes checked the holes of an archive at a quarter of the
// speed.
var zeros [manifest.ChunkSize]byte

func isZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

func clampID(id int) uint32 {
	if id < 0 || id > 1<<32-1 {
		return 0
	}
	return uint32(id)
}

const xattrPrefix = "SCHILY.xattr."

func xattrs(recs map[string]string) []manifest.Xattr {
	var out []manifest.Xattr
	for k, v := range recs {
		if name, ok := strings.CutPrefix(k, xattrPrefix); ok {
			out = append(out, manifest.Xattr{Name: name, Value: []byte(v)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// tailReader remembers the last tar block read, so that an archive cut at
// a block boundary (which archive/tar reports as a clean end) is told
// from one that ends with its zero-block end marker.
type tailReader struct {
	r    io.Reader
	last [512]byte
	n    int64
}

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if n >= len(t.last) {
		copy(t.last[:], p[n-len(t.last):n])
	} else if n > 0 {
		copy(t.last[:], t.last[n:])
		copy(t.last[len(t.last)-n:], p[:n])
	}
	t.n += int64(n)
	return n, err
}

func (t *tailReader) endMarker() bool {
	return t.n >= int64(len(t.last)) && isZero(t.last[:])
}
