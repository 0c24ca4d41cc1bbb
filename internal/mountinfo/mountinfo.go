// Package mountinfo reads the kernel's mount table (/proc/self/mountinfo,
// proc(5)). An Entry is one mount: its mountpoint, the device number of
// its superblock (for a FUSE mount, the name of its connection in fusectl)
// and the filesystem type and source after the " - " separator.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Entry is one line of the mount table.
type Entry struct {
	Major, Minor uint32
	Dir          string // the mountpoint, unescaped
	FSType       string
	Source       string
}

// Conn is the name of a FUSE mount's connection under
// /sys/fs/fuse/connections: the kernel's dev_t of its superblock.
func (e Entry) Conn() string { return strconv.FormatUint(uint64(e.Major)<<20|uint64(e.Minor), 10) }

// IsHomefs reports whether the entry is a homefs FUSE mount: its type is
// fuse.homefs, or its source names a homefs session.
func (e Entry) IsHomefs() bool {
	return e.FSType == "fuse.homefs" || strings.HasPrefix(e.FSType, "fuse") && strings.HasPrefix(e.Source, "homefs:")
}

// Parse reads the mountinfo format: the device is field 3, the mountpoint
// field 5, the filesystem type and source follow the " - " separator.
func Parse(r io.Reader) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 5 || len(g) < 2 {
			continue
		}
		e := Entry{Dir: unescape(f[4]), FSType: g[0], Source: unescape(g[1])}
		if maj, min, ok := strings.Cut(f[2], ":"); ok {
			a, err1 := strconv.ParseUint(maj, 10, 32)
			b, err2 := strconv.ParseUint(min, 10, 32)
			if err1 == nil && err2 == nil {
				e.Major, e.Minor = uint32(a), uint32(b)
			}
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

// Read returns this process's mount table.
func Read() ([]Entry, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	es, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	return es, nil
}

// ConnAt returns the fusectl name of the connection (Entry.Conn) of the
// topmost mount at dir that match accepts, read from this process's mount
// table: a daemon finds its own mount's connection without a request to
// it.
func ConnAt(dir string, match func(Entry) bool) (string, error) {
	es, err := Read()
	if err != nil {
		return "", err
	}
	conn := ""
	for _, e := range es {
		if e.Dir == dir && match(e) {
			conn = e.Conn()
		}
	}
	if conn == "" {
		return "", fmt.Errorf("no such FUSE mount at %s in the mount table", dir)
	}
	return conn, nil
}

// unescape undoes the octal escapes (\040 for space, …).
func unescape(s string) string {
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
