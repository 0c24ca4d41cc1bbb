package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const uringSwitch = "/sys/module/fuse/parameters/enable_uring"

func readSwitch(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(uringSwitch)
	if err != nil {
		t.Skipf("kernel without FUSE over io_uring: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// TestServeFuseURing: serve --fuse-uring=on serves mounts over io_uring,
// says in its log whether it turned the host's switch on, and leaves the
// switch as it found it once it stopped; --fuse-uring=auto and off never
// write it.
func TestServeFuseURing(t *testing.T) {
	needFUSE(t)
	before := readSwitch(t)

	e := newEnv(t)
	e.start() // --fuse-uring=on
	mnt := e.mkdir("m")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)
	require.NoError(t, os.WriteFile(filepath.Join(mnt, "f"), []byte("x"), 0o644))
	require.Equal(t, "Y", readSwitch(t))
	logs := e.logs.String()
	require.Contains(t, logs, "transport=io_uring", logs)
	if before == "N" {
		require.Contains(t, logs, "turned on FUSE over io_uring for the whole host", logs)
	} else {
		require.NotContains(t, logs, "turned on FUSE over io_uring", logs)
	}
	e.stop()
	require.Equal(t, before, readSwitch(t), "the switch is as the daemon found it")

	for _, mode := range []string{"auto", "off"} {
		e := newEnv(t)
		e.start("--fuse-uring=" + mode)
		mnt := e.mkdir("m")
		e.ok("session", "create", "s")
		e.ok("mount", "s", mnt)
		want := "transport=/dev/fuse"
		if mode == "auto" && before == "Y" {
			want = "transport=io_uring"
		}
		require.Contains(t, e.logs.String(), want, mode)
		require.NotContains(t, e.logs.String(), "turned on FUSE over io_uring", mode)
		e.stop()
		require.Equal(t, before, readSwitch(t), mode)
	}
	newEnv(t).fails(2, "want auto, on or off", "serve", "--fuse-uring=yes")
}
