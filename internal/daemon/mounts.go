package daemon

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// mountsFile is the record of the mounts a daemon serves, kept so that the
// next start after a crash knows which leftover mounts are its own.
const mountsFile = "mounts.json"

type mountsRecord struct {
	PID    int         `json:"pid"`
	Mounts []MountInfo `json:"mounts"`
}

// writeMounts replaces <root>/mounts.json durably: temp file, fsync,
// rename, fsync of the directory.
func writeMounts(root string, mounts []MountInfo) error {
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Dir < mounts[j].Dir })
	data, err := json.MarshalIndent(mountsRecord{PID: os.Getpid(), Mounts: mounts}, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(root, mountsFile), append(data, '\n'), 0o600)
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename this finds nothing
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func readMounts(root string) ([]MountInfo, error) {
	data, err := os.ReadFile(filepath.Join(root, mountsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec mountsRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", mountsFile, err)
	}
	return rec.Mounts, nil
}

// kernelMount is one line of /proc/self/mountinfo.
type kernelMount struct {
	Dir    string
	FSType string
	Source string
}

// parseMountinfo reads the mountinfo format (proc(5)): the mountpoint is
// field 5, the filesystem type and source follow the " - " separator.
func parseMountinfo(r io.Reader) ([]kernelMount, error) {
	var out []kernelMount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 5 || len(g) < 2 {
			continue
		}
		out = append(out, kernelMount{Dir: unescapeMountinfo(f[4]), FSType: g[0], Source: unescapeMountinfo(g[1])})
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes the octal escapes (\040 for space, …).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func kernelMounts() ([]kernelMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseMountinfo(f)
}

// isHomefsMount reports whether a kernel mount is a homefs FUSE mount.
func isHomefsMount(m kernelMount) bool {
	return strings.HasPrefix(m.FSType, "fuse") && strings.HasPrefix(m.Source, "homefs:")
}

// isMountpoint reports whether dir is the mountpoint of any mount.
func isMountpoint(dir string) (bool, error) {
	ms, err := kernelMounts()
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Dir == dir {
			return true, nil
		}
	}
	return false, nil
}

// cleanStaleMounts detaches the homefs mounts that an earlier run of this
// daemon recorded in mounts.json and that are still in the mount table
// (after a crash their server is gone and every access fails with
// ENOTCONN). Mounts of other daemons are left alone, and no mount is
// touched by stat: a mount whose server hangs would hang the start.
// It returns the dirs detached.
func cleanStaleMounts(root string, log *slog.Logger) ([]string, error) {
	recorded, err := readMounts(root)
	if err != nil {
		log.Warn("ignoring unreadable mount record", "err", err)
	}
	if len(recorded) == 0 {
		return nil, nil
	}
	ours := make(map[string]bool, len(recorded))
	for _, m := range recorded {
		ours[m.Dir] = true
	}
	kms, err := kernelMounts()
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var cleaned []string
	// Deepest first, so that nested mounts come off before their parents.
	sort.Slice(kms, func(i, j int) bool { return len(kms[i].Dir) > len(kms[j].Dir) })
	for _, km := range kms {
		if !isHomefsMount(km) || !ours[km.Dir] {
			continue
		}
		if err := syscall.Unmount(km.Dir, syscall.MNT_DETACH); err != nil {
			log.Warn("could not detach stale mount", "dir", km.Dir, "source", km.Source, "err", err)
			continue
		}
		log.Info("detached stale mount", "dir", km.Dir, "source", km.Source)
		cleaned = append(cleaned, km.Dir)
	}
	return cleaned, nil
}
