// Package loopfs gives tests a fresh ext4 on a loop device: a disk of a
// chosen size to fill (disk-full tests) and a native filesystem with
// known options to compare a mount against.
package loopfs

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// Ext4 mounts a fresh ext4 of size bytes on a loop device, with the
// options given (as mount(8) takes them after -o; "" for the defaults),
// and returns its mountpoint, unmounted and detached when the test ends.
// Without loop devices it skips, or fails under CI=true.
func Ext4(t testing.TB, size int64, options string) string {
	t.Helper()
	unavailable := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("CI") == "true" {
			t.Fatalf("loop devices unavailable: "+format, args...)
		}
		t.Skipf("loop devices unavailable: "+format, args...)
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "disk.img")
	f, err := os.Create(img)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		unavailable("mkfs.ext4: %v: %s", err, out)
	}
	out, err := exec.Command("losetup", "-f", "--show", img).CombinedOutput()
	if err != nil {
		unavailable("losetup: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	mnt := filepath.Join(dir, "mnt")
	require.NoError(t, os.Mkdir(mnt, 0o755))
	if err := unix.Mount(dev, mnt, "ext4", 0, options); err != nil {
		unavailable("mount %s: %v", dev, err)
	}
	// Cleanups run last in, first out: the caller's daemon stops first.
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	return mnt
}
