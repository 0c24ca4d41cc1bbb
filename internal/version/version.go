// Package version names the homefs build: the version a release sets with
//
//	go build -ldflags "-X github.com/homefs/homefs/internal/version.Version=v1.2.3"
//
// (make build sets it from git describe), else what the Go toolchain
// recorded: the module version, or the VCS revision with "-dirty" for a
// build from a modified tree.
package version

import (
	"runtime/debug"
	"sync"
)

// Version is set by the linker; empty means "ask the build info".
var Version string

var fromBuild = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return fromBuildInfo(bi)
})

// String is the build's version.
func String() string {
	if Version != "" {
		return Version
	}
	return fromBuild()
}

func fromBuildInfo(bi *debug.BuildInfo) string {
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	v := "devel-" + rev
	if modified == "true" {
		v += "-dirty"
	}
	return v
}
