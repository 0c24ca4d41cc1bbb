package fsck

import (
	"os"
	"path/filepath"
)

func mkdirAll(p string) error           { return os.MkdirAll(filepath.Dir(p), 0o755) }
func writeAll(p string, s string) error { return os.WriteFile(p, []byte(s), 0o644) }
