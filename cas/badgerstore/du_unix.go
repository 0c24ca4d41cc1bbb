//go:build unix

package badgerstore

import (
	"os"
	"syscall"
)

// diskUsage is the space fi's blocks take.
func diskUsage(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}
