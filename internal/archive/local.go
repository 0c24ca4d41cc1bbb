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
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := make(map[inode]string)
	var entries, bytes int64
	// WalkDir does not descend into a root that is a symlink: it would
	// write an empty stream.
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return err
	}
	if root, err = filepath.Abs(root); err != nil {
		return err
	}
	st, err := os.Stat(root)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: %w", dir, syscall.ENOTDIR)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel := filepath.ToSlash(p[len(root)+1:])
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
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
				if first, ok := seen[key]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
				} else {
					seen[key] = rel
				}
			}
		}
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		entries++
		if hdr.Typeflag == tar.TypeReg {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			bytes += n
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		if progress != nil {
			progress(entries, bytes)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Extract writes the tar stream r into dir, which must be empty or absent.
// Every entry is checked as Import checks it. Symlinks are written as they
// are, wherever they point, and never followed: no path is created, and
// no mode, owner, time or xattr set, through one, so a link made by the
// stream cannot redirect a later entry. Owners are restored when running
// as root.
func Extract(ctx context.Context, r io.Reader, dir string, progress Progress) error {
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
	// Every path below is opened through root, which refuses any that
	// would leave dir (by "..", an absolute symlink, or a symlink made
	// by another process meanwhile); the checks of each entry add the
	// stricter rule that no entry goes through a symlink at all.
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type dirTime struct {
		path string
		t    time.Time
	}
	var dirTimes []dirTime
	asRoot := os.Geteuid() == 0
	tr := tar.NewReader(r)
	var entries, bytes int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %v", ErrMalformed, err)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		rel, err := cleanName(hdr.Name)
		if err != nil {
			return err
		}
		if rel == "" {
			continue
		}
		target := filepath.FromSlash(rel) // relative to root
		if err := noSymlinkParents(root, rel); err != nil {
			return err
		}
		mode := os.FileMode(hdr.Mode & 0o777)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(target, 0o700); errors.Is(err, fs.ErrExist) {
				// Made by an earlier entry: a directory, never a symlink
				// that the chmod below would follow.
				if st, err := root.Lstat(target); err != nil || !st.IsDir() {
					return fmt.Errorf("%w: directory %q: the archive made it something else before", ErrUnsafe, hdr.Name)
				}
			} else if err != nil {
				return err
			}
			dirTimes = append(dirTimes, dirTime{target, hdr.ModTime})
		case tar.TypeReg: // the reader turns the old TypeRegA into TypeReg
			f, err := root.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
			if err != nil {
				return err
			}
			n, err := io.Copy(f, tr)
			bytes += n
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		case tar.TypeSymlink:
			if err := checkTarget(rel, hdr.Linkname); err != nil {
				return err
			}
			if err := root.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeFifo:
			if err := atParent(root, target, func(dfd int, base string) error { return unix.Mkfifoat(dfd, base, 0o600) }); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		case tar.TypeChar, tar.TypeBlock:
			// mknod needs CAP_MKNOD, as GNU tar's extraction does.
			kind := uint32(unix.S_IFCHR)
			if hdr.Typeflag == tar.TypeBlock {
				kind = unix.S_IFBLK
			}
			dev := int(unix.Mkdev(uint32(hdr.Devmajor), uint32(hdr.Devminor)))
			if err := atParent(root, target, func(dfd int, base string) error { return unix.Mknodat(dfd, base, kind|0o600, dev) }); err != nil {
				return fmt.Errorf("%s: device node: %w", rel, err)
			}
		case tar.TypeLink:
			first, err := cleanName(hdr.Linkname)
			if err != nil || first == "" {
				return fmt.Errorf("%w: hard link %q → %q", ErrUnsafe, hdr.Name, hdr.Linkname)
			}
			if err := noSymlinkParents(root, first); err != nil {
				return err
			}
			src := filepath.FromSlash(first)
			st, err := root.Lstat(src)
			if err != nil || st.IsDir() {
				return fmt.Errorf("%w: hard link %q → %q: not an earlier non-directory", ErrUnsafe, hdr.Name, hdr.Linkname)
			}
			// link(2) links a symlink itself, never what it points to.
			if err := root.Link(src, target); err != nil {
				return err
			}
			continue
		default:
			return fmt.Errorf("%w: %q has tar type %q", ErrUnsupported, hdr.Name, hdr.Typeflag)
		}
		if asRoot {
			_ = root.Lchown(target, hdr.Uid, hdr.Gid)
		}
		if hdr.Typeflag == tar.TypeSymlink {
			ts := []unix.Timespec{unix.NsecToTimespec(hdr.ModTime.UnixNano()), unix.NsecToTimespec(hdr.ModTime.UnixNano())}
			_ = atParent(root, target, func(dfd int, base string) error {
				return unix.UtimesNanoAt(dfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
			})
		} else {
			if err := root.Chmod(target, mode|os.FileMode(hdr.Mode)&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky)); err != nil {
				return err
			}
			_ = atParent(root, target, func(dfd int, base string) error {
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
				if err := root.Chtimes(target, hdr.ModTime, hdr.ModTime); err != nil {
					return err
				}
			}
		}
		entries++
		if progress != nil {
			progress(entries, bytes)
		}
	}
	// Directory times last: creating entries changed them.
	for i := len(dirTimes) - 1; i >= 0; i-- {
		_ = root.Chtimes(dirTimes[i].path, dirTimes[i].t, dirTimes[i].t)
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
