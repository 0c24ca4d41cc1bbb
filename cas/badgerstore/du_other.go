//go:build !unix

package badgerstore

import "os"

// diskUsage is fi's size where blocks are not reported.
func diskUsage(fi os.FileInfo) int64 { return fi.Size() }
