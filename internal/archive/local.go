package archive

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TarDir writes the content of dir (not dir itself) to w as a tar stream,
// in lexical order. Symlinks are stored as links, a file with several
// names once plus hard links; fifos and device nodes as tar has them;
// sockets are skipped, as GNU tar skips them.
// dir itself may be a symlink: the directory it names is read.
func TarDir(ctx context.Context, dir string, w io.Writer, progress Progress) error {
	root, err := walkRoot(dir)
	if err != nil {
		return err
	}
	t := &dirTarrer{
		ctx:      ctx,
		tw:       tar.NewWriter(w),
		root:     root,
		seen:     make(map[inode]string),
		progress: progress,
	}
	if err := filepath.WalkDir(root, t.visit); err != nil {
		return err
	}
	return t.tw.Close()
}

// walkRoot is the absolute path of the directory dir names, through
// symlinks: WalkDir does not descend into a root that is a symlink, and
// would write an empty stream.
func walkRoot(dir string) (string, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", err
	}
	if root, err = filepath.Abs(root); err != nil {
		return "", err
	}
	st, err := os.Stat(root)
	if err != nil {
		return "", err
	}
	if !st.IsDir() {
		return "", fmt.Errorf("%s: %w", dir, syscall.ENOTDIR)
	}
	return root, nil
}

type inode struct{ dev, ino uint64 }

// dirTarrer holds what TarDir carries from one walked path to the next.
type dirTarrer struct {
	ctx            context.Context
	tw             *tar.Writer
	root           string
	seen           map[inode]string // a multiply linked inode → its first name
	entries, bytes int64
	progress       Progress
}

// visit writes the walked path p (a filepath.WalkDirFunc).
func (t *dirTarrer) visit(p string, d fs.DirEntry, err error) error {
	if err != nil {
		return err
	}
	if err := t.ctx.Err(); err != nil {
		return err
	}
	if p == t.root {
		return nil
	}
	rel := filepath.ToSlash(p[len(t.root)+1:])
	info, err := d.Info()
	if err != nil {
		return err
	}
	hdr, err := t.header(p, rel, info)
	if err != nil || hdr == nil {
		return err
	}
	if err := t.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	t.entries++
	if hdr.Typeflag == tar.TypeReg {
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		n, err := io.Copy(t.tw, f)
		f.Close()
		t.bytes += n
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if t.progress != nil {
		t.progress(t.entries, t.bytes)
	}
	return nil
}

// header is the tar header of p, named rel; nil for a socket, which is
// skipped. A later name of an inode seen before is a hard link to the
// first.
func (t *dirTarrer) header(p, rel string, info fs.FileInfo) (*tar.Header, error) {
	link := ""
	if info.Mode()&fs.ModeSymlink != 0 {
		var err error
		if link, err = os.Readlink(p); err != nil {
			return nil, err
		}
	}
	if info.Mode()&fs.ModeSocket != 0 {
		return nil, nil
	}
	hdr, err := tar.FileInfoHeader(info, link)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	hdr.Name = rel
	hdr.Format = tar.FormatPAX
	hdr.Uname, hdr.Gname = "", ""
	if sys, ok := info.Sys().(*syscall.Stat_t); ok {
		hdr.ModTime = time.Unix(sys.Mtim.Unix())
		hdr.ChangeTime = time.Unix(sys.Ctim.Unix())
		hdr.AccessTime = time.Time{}
		if !info.IsDir() && sys.Nlink > 1 {
			key := inode{uint64(sys.Dev), sys.Ino}
			if first, ok := t.seen[key]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				t.seen[key] = rel
			}
		}
	}
	if info.IsDir() {
		hdr.Name += "/"
	}
	return hdr, nil
}

// Extract writes the tar stream r into dir, which must be empty or absent.
// Every entry is checked as Import checks it. Symlinks are written as they
// are, wherever they point, and never followed: no path is created, and
// no mode, owner, time or xattr set, through one, so a link made by the
// stream cannot redirect a later entry. Owners are restored when running
// as root.
func Extract(ctx context.Context, r io.Reader, dir string, progress Progress) error {
	if err := emptyDir(dir); err != nil {
		return err
	}
	// Every path below is opened through root, which refuses any that
	// would leave dir (by "..", an absolute symlink, or a symlink made
	// by another process meanwhile); the checks of each entry add the
	// stricter rule that no entry goes through a symlink at all.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	x := &extractor{
		root:     root,
		tr:       tar.NewReader(r),
		asRoot:   os.Geteuid() == 0,
		progress: progress,
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := x.tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		if err := x.entry(hdr); err != nil {
			return err
		}
	}
	// Directory times last: creating entries changed them.
	for i := len(x.dirTimes) - 1; i >= 0; i-- {
		_ = root.Chtimes(x.dirTimes[i].path, x.dirTimes[i].t, x.dirTimes[i].t)
	}
	return nil
}

// emptyDir makes dir if it is absent and refuses it if it holds anything.
func emptyDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(ents) > 0 {
		return fmt.Errorf("%s: %w: directory not empty", dir, fs.ErrExist)
	}
	return nil
}

// extractor holds what Extract carries from one entry to the next.
type extractor struct {
	root     *os.Root
	tr       *tar.Reader
	asRoot   bool
	dirTimes []dirTime // set once every entry is in place
	// entries counts the entries written, hard links and the root's own
	// entry left out.
	entries, bytes int64
	progress       Progress
}

type dirTime struct {
	path string
	t    time.Time
}

// entry checks and writes one entry, then sets its attributes.
func (x *extractor) entry(hdr *tar.Header) error {
	rel, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		return nil
	}
	target := filepath.FromSlash(rel) // relative to root
	if err := checkSparse(hdr); err != nil {
		return err
	}
	if err := noSymlinkParents(x.root, rel); err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		err = x.dir(target, hdr)
	case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
		err = x.file(target, rel)
	case tar.TypeSymlink:
		if err := checkTarget(rel, hdr.Linkname); err != nil {
			return err
		}
		err = x.root.Symlink(hdr.Linkname, target)
	case tar.TypeFifo:
		if err := atParent(x.root, target, func(dfd int, base string) error { return unix.Mkfifoat(dfd, base, 0o600) }); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
	case tar.TypeChar, tar.TypeBlock:
		err = x.device(target, rel, hdr)
	case tar.TypeLink:
		return x.hardLink(target, hdr)
	default:
		return fmt.Errorf("%w: %q has tar type %q", ErrUnsupported, hdr.Name, hdr.Typeflag)
	}
	if err != nil {
		return err
	}
	if err := x.setAttrs(target, hdr); err != nil {
		return err
	}
	x.entries++
	if x.progress != nil {
		x.progress(x.entries, x.bytes)
	}
	return nil
}

func (x *extractor) dir(target string, hdr *tar.Header) error {
	if err := x.root.Mkdir(target, 0o700); errors.Is(err, fs.ErrExist) {
		// Made by an earlier entry: a directory, never a symlink
		// that the chmod of setAttrs would follow.
		if st, err := x.root.Lstat(target); err != nil || !st.IsDir() {
			return fmt.Errorf("%w: directory %q: the archive made it something else before", ErrUnsafe, hdr.Name)
		}
	} else if err != nil {
		return err
	}
	x.dirTimes = append(x.dirTimes, dirTime{target, hdr.ModTime})
	return nil
}

func (x *extractor) file(target, rel string) error {
	f, err := x.root.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, x.tr)
	x.bytes += n
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s: %w", rel, err)
	}
	return nil
}

// device makes a device node; mknod needs CAP_MKNOD, as GNU tar's
// extraction does.
func (x *extractor) device(target, rel string, hdr *tar.Header) error {
	kind := uint32(unix.S_IFCHR)
	if hdr.Typeflag == tar.TypeBlock {
		kind = unix.S_IFBLK
	}
	dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
	if err := atParent(x.root, target, func(dfd int, base string) error { return unix.Mknodat(dfd, base, kind|0o600, dev) }); err != nil {
		return fmt.Errorf("%s: device node: %w", rel, err)
	}
	return nil
}

// hardLink links target to an earlier non-directory of the archive. The
// link shares its inode's attributes, so none are set and no progress is
// told.
func (x *extractor) hardLink(target string, hdr *tar.Header) error {
	first, err := cleanName(hdr.Linkname)
	if err != nil || first == "" {
		return fmt.Errorf("%w: hard link %q → %q", ErrUnsafe, hdr.Name, hdr.Linkname)
	}
	if err := noSymlinkParents(x.root, first); err != nil {
		return err
	}
	src := filepath.FromSlash(first)
	st, err := x.root.Lstat(src)
	if err != nil || st.IsDir() {
		return fmt.Errorf("%w: hard link %q → %q: not an earlier non-directory", ErrUnsafe, hdr.Name, hdr.Linkname)
	}
	// link(2) links a symlink itself, never what it points to.
	return x.root.Link(src, target)
}

// setAttrs sets the owner (as root), mode, xattrs and time of the entry
// just written; of a symlink, only its owner and time, on the link itself.
// A directory's time waits for the end of the stream (dirTimes).
func (x *extractor) setAttrs(target string, hdr *tar.Header) error {
	if x.asRoot {
		_ = x.root.Lchown(target, hdr.Uid, hdr.Gid)
	}
	if hdr.Typeflag == tar.TypeSymlink {
		ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
		_ = atParent(x.root, target, func(dfd int, base string) error {
			return unix.UtimesNanoAt(dfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
		})
		return nil
	}
	mode := os.FileMode(hdr.Mode & 0o777)
	if err := x.root.Chmod(target, mode|os.FileMode(hdr.Mode)&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
		return err
	}
	_ = atParent(x.root, target, func(dfd int, base string) error {
		// lsetxattr has no *at form; the directory's descriptor
		// in /proc stands for the path up to the entry.
		p := fmt.Sprintf("/proc/self/fd/%d/%s", dfd, base)
		for k, v := range hdr.PAXRecords {
			if name, ok := strings.CutPrefix(k, xattrPrefix); ok {
				_ = unix.Lsetxattr(p, name, []byte(v), 0)
			}
		}
		return nil
	})
	if hdr.Typeflag != tar.TypeDir {
		return x.root.Chtimes(target, hdr.ModTime, hdr.ModTime)
	}
	return nil
}

// atParent calls fn with a descriptor of the directory that holds rel
// (opened through root) and rel's last element.
func atParent(root *os.Root, rel string, fn func(dfd int, base string) error) error {
	d, err := root.Open(filepath.Dir(rel))
	if err != nil {
		return err
	}
	defer d.Close()
	return fn(int(d.Fd()), filepath.Base(rel))
}

// noSymlinkParents refuses rel if a directory on its way from root is a
// symlink (or not a directory), and makes the missing ones.
func noSymlinkParents(root *os.Root, rel string) error {
	parts := strings.Split(rel, "/")
	p := ""
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		st, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			if err := root.Mkdir(p, 0o755); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !st.IsDir() {
			return fmt.Errorf("%w: %q goes through %q, which is not a directory", ErrUnsafe, rel, p)
		}
	}
	return nil
}
