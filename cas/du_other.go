//go:build !unix

package cas

import "os"

// diskUsage is fi's size where blocks are not reported.
func diskUsage(fi os.FileInfo) int64 { return fi.Size() }
