package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/internal/remote/s3test"
	"github.com/homefs/homefs/internal/testkit/cputest"
)

// TestRemoteFrozenGatewayLocalOps: while a lazy read waits for a frozen
// gateway (on the CPU of each FUSE ring in turn), stat, ls -l and reads of
// local files on the same mount, from every CPU, are answered before the
// lazy read gives up; then it fails with EIO within its bounds.
func TestRemoteFrozenGatewayLocalOps(t *testing.T) {
	needFUSE(t)
	srv := s3test.Start(t)
	url := "s3://" + srv.Bucket(t) + "/fleet"
	cpus := cputest.Usable(t)
	a, b := newEnv(t), newEnv(t)
	a.daemonEnv = remoteCreds()
	a.start(quickRemote...)
	// A lazy read waits for the frozen gateway for seconds: long enough
	// to see what the mount does meanwhile, bounded all the same.
	b.daemonEnv = remoteCreds()
	b.start("--remote-idle-timeout", "1s", "--remote-retry-total", "15s")
	for _, e := range []*env{a, b} {
		e.ok("remote", "add", "origin", url, "--endpoint", srv.Endpoint)
	}
	remote := func(c int) string { return fmt.Sprintf("workspace/remote-%d.bin", c) }
	local := func(c, x int) string { return fmt.Sprintf("workspace/local-%d-%d.txt", c, x) }
	mntA := a.mkdir("a")
	a.ok("session", "create", "s")
	a.ok("mount", "s", mntA)
	for _, c := range cpus {
		writeFile(t, filepath.Join(mntA, remote(c)), randomText(64<<10, uint64(20+c)))
		for _, x := range cpus {
			writeFile(t, filepath.Join(mntA, local(c, x)), local(c, x))
		}
	}
	a.ok("capture", "s", "--push")
	mntB := b.mkdir("b")
	b.ok("mount", "--remote", "origin", "s", mntB)
	// The local files' chunks are fetched now: local when the gateway
	// freezes.
	for _, c := range cpus {
		for _, x := range cpus {
			require.Equal(t, local(c, x), readFile(t, filepath.Join(mntB, local(c, x))))
		}
	}

	srv.Freeze()
	thawed := false
	t.Cleanup(func() {
		if !thawed {
			srv.Thaw()
		}
	})
	for round, c := range cpus {
		read := cputest.On(c, func() error {
			_, err := os.ReadFile(filepath.Join(mntB, remote(c)))
			return err
		})
		// The lazy read is in the remote's hands once the daemon retries
		// a chunk's GET it had not asked for before.
		for retriedChunks(b.logs.String()) <= round {
			select {
			case err := <-read:
				t.Fatalf("the lazy read of %s ended (%v) before the daemon retried its chunk", remote(c), err)
			default:
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, x := range cpus {
			require.NoError(t, <-cputest.On(x, func() error { return localOpsAt(mntB, remote(c), local(c, x)) }), "CPU %d", x)
		}
		// The daemon logs the lazy read's failure before it answers it:
		// local requests that waited for it come after that line.
		if strings.Contains(b.logs.String(), remote(c)) {
			t.Fatalf("stat, ls or a local read waited for the lazy read of %s on CPU %d to fail", remote(c), c)
		}
		require.ErrorIs(t, <-read, syscall.EIO, "a lazy read from a frozen gateway")
		require.Contains(t, b.logs.String(), remote(c))
	}
	srv.Thaw()
	thawed = true
	// A fetch the kernel's retry of a failed read started during the
	// freeze may still be failing, and a read that joins it fails with
	// it, and a loaded gateway may take a while to serve again after
	// SIGCONT: the reads succeed once it does.
	for _, c := range cpus {
		var got []byte
		var err error
		for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(time.Second) {
			if got, err = os.ReadFile(filepath.Join(mntB, remote(c))); err == nil || time.Now().After(deadline) {
				break
			}
		}
		require.NoError(t, err, "a read of %s after the gateway is back", remote(c))
		require.Equal(t, randomText(64<<10, uint64(20+c)), string(got))
	}
	b.ok("unmount", mntB)
}

// retriedChunks counts the distinct chunk GETs the daemon retried.
func retriedChunks(logs string) int {
	seen := map[string]bool{}
	for _, line := range strings.Split(logs, "\n") {
		if !strings.Contains(line, "remote request failed: retrying") {
			continue
		}
		_, rest, ok := strings.Cut(line, "request=\"get ")
		if !ok || !strings.Contains(rest, "/chunks/") {
			continue
		}
		key, _, _ := strings.Cut(rest, "\"")
		seen[key] = true
	}
	return len(seen)
}

// localOpsAt stats the file being read, lists its directory as ls -l
// does, and reads a local file after dropping its cached pages (so that
// the read reaches the daemon).
func localOpsAt(mnt, reading, name string) error {
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(mnt, reading), &st); err != nil {
		return err
	}
	ents, err := os.ReadDir(filepath.Dir(filepath.Join(mnt, reading)))
	if err != nil {
		return err
	}
	for _, ent := range ents {
		if _, err := ent.Info(); err != nil {
			return err
		}
	}
	f, err := os.Open(filepath.Join(mnt, name))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return err
	}
	b := make([]byte, 256)
	n, err := f.Read(b)
	if err != nil {
		return err
	}
	if string(b[:n]) != name {
		return fmt.Errorf("read %s: %q", name, b[:n])
	}
	return nil
}
