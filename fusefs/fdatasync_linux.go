package fusefs

import (
	"os"
	"syscall"
)

// fdatasync makes f's data (and the size that reaches it) durable.
func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }
