package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/homefs/homefs/internal/testkit/loopfs"
)

func availMiB(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(dir, &st))
	return int64(st.Bavail) * st.Bsize >> 20
}

// fillUntilFull writes incompressible files of 8 MiB into dir, each
// fsynced, until one fails; it returns that error and the files written
// whole. The one that failed is removed, as a writer that meets ENOSPC
// drops its partial output. With flag os.O_RDWR the daemon serves the
// writes; os.O_WRONLY stages them (staged.go).
func fillUntilFull(t *testing.T, dir, prefix string, flag int, seed uint64, limit int) ([]string, error) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	block := make([]byte, 1<<20)
	var done []string
	for i := 0; i < limit; i++ {
		p := filepath.Join(dir, fmt.Sprintf("%s%03d", prefix, i))
		err := func() error {
			f, err := os.OpenFile(p, flag|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			for j := 0; j < 8; j++ {
				for k := range block {
					block[k] = byte(rng.Uint32())
				}
				if _, err := f.Write(block); err != nil {
					f.Close()
					return err
				}
			}
			if err := f.Sync(); err != nil {
				f.Close()
				return err
			}
			return f.Close()
		}()
		if err != nil {
			require.NoError(t, os.Remove(p))
			return done, err
		}
		done = append(done, p)
	}
	return done, nil
}

// writeServed writes a file through O_RDWR, which the daemon serves (a
// write-only open would stage it: staged.go), without an fsync: the bytes
// wait in the daemon's write buffers for the next flush.
func writeServed(p string, data []byte) error {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// TestDiskFull fills the daemon's disk through a mount: the writer gets
// ENOSPC, the daemon and its mount stay up, a restart on the full disk
// works, and dropping data and gc make room for writes again.
func TestDiskFull(t *testing.T) {
	needFUSE(t)
	disk := loopfs.Ext4(t, 256<<20, "")
	e := newEnv(t)
	e.root = filepath.Join(disk, "root")
	e.start()
	mnt := e.mkdir("mnt")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)

	written, err := fillUntilFull(t, mnt, "a", os.O_RDWR, 1, 40)
	require.Error(t, err, "256 MiB cannot hold 320 MiB")
	require.True(t, errors.Is(err, syscall.ENOSPC), "want ENOSPC, got %v", err)
	t.Logf("full after %d files (%d MiB); %d MiB left on the disk", len(written), 8*len(written), availMiB(t, disk))
	require.NotEmpty(t, written)

	// The daemon and the mount live on: reads work, writes get ENOSPC.
	e.ok("session", "list")
	first, err := os.ReadFile(written[0])
	require.NoError(t, err)
	require.Len(t, first, 8<<20)
	// (A write that finds no room flushes once and tries again, since
	// the journal's copies of buffered writes take room until a flush:
	// one or two more files may fit before the disk is full again.)
	_, err = fillUntilFull(t, mnt, "b", os.O_RDWR, 2, 40)
	require.True(t, errors.Is(err, syscall.ENOSPC), "want ENOSPC, got %v", err)

	// Files smaller than a spill, written and closed, wait in the daemon's
	// write buffers for the next flush: they get ENOSPC from write(2) when
	// the store could not take them, as on ext4, never from the flush
	// later; the unmount below stores every one that was accepted.
	rng := rand.New(rand.NewPCG(5, 1))
	small := make([]byte, 1<<20)
	kept := 0
	for ; kept < 64; kept++ {
		for k := range small {
			small[k] = byte(rng.Uint32())
		}
		p := filepath.Join(mnt, fmt.Sprintf("small%03d", kept))
		err = writeServed(p, small)
		if err != nil {
			require.True(t, errors.Is(err, syscall.ENOSPC), "want ENOSPC, got %v", err)
			require.NoError(t, os.Remove(p))
			break
		}
	}
	require.Less(t, kept, 64, "64 MiB of small files accepted on a full disk")
	t.Logf("%d small files accepted on the full disk", kept)

	// A restart on the full disk.
	e.ok("unmount", mnt)
	e.stop()
	e.start()
	e.ok("session", "list")
	e.ok("mount", "s", mnt)
	again, err := os.ReadFile(written[0])
	require.NoError(t, err)
	require.True(t, bytes.Equal(first, again))
	// Writes fsynced before the restart waited in the journal and counted
	// against the room; the restart stored them, so a file or two may fit
	// now, but the disk fills again with ENOSPC and the daemon lives.
	refilled, err := fillUntilFull(t, mnt, "c", os.O_RDWR, 3, 8)
	require.True(t, errors.Is(err, syscall.ENOSPC), "want ENOSPC after the restart, got %v", err)
	t.Logf("%d files accepted after the restart", len(refilled))
	e.ok("session", "list")
	r := e.run("capture", "s")
	t.Logf("capture on the full disk: code %d: %s", r.code, r.stderr)

	// Dropping the data and gc give the space back without a restart.
	e.ok("unmount", mnt)
	before := availMiB(t, disk)
	e.ok("session", "rm", "--purge", "s")
	e.ok("gc")
	t.Logf("gc: %d MiB free before, %d MiB after", before, availMiB(t, disk))
	e.ok("session", "create", "t")
	e.ok("mount", "t", mnt)
	more, err := fillUntilFull(t, mnt, "d", os.O_RDWR, 4, 4)
	require.NoError(t, err, "writes work again once space is freed")
	require.Len(t, more, 4)
	e.ok("unmount", mnt)
}

// TestDiskFullStaged fills the disk through staged files (`cmd > file`),
// whose fsynced bytes wait in staging files and the journal until a flush
// absorbs them: the writer gets ENOSPC, the daemon restarts on the full
// disk, the session's journal cannot be folded into the store until space
// is freed elsewhere, and then it mounts without a restart, nothing lost.
func TestDiskFullStaged(t *testing.T) {
	needFUSE(t)
	disk := loopfs.Ext4(t, 256<<20, "")
	other := filepath.Join(disk, "other")
	require.NoError(t, os.WriteFile(other, bytes.Repeat([]byte{1}, 100<<20), 0o644))
	e := newEnv(t)
	e.root = filepath.Join(disk, "root")
	e.start()
	mnt := e.mkdir("mnt")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)

	written, err := fillUntilFull(t, mnt, "a", os.O_WRONLY, 1, 40)
	require.True(t, errors.Is(err, syscall.ENOSPC), "want ENOSPC, got %v", err)
	require.NotEmpty(t, written)
	t.Logf("full after %d files; %d MiB left on the disk", len(written), availMiB(t, disk))
	e.ok("session", "list")
	first, err := os.ReadFile(written[0])
	require.NoError(t, err)

	// The fsynced files cannot move into the store: unmount and shutdown
	// say so, and keep them (staging files and journal).
	e.fails(exitNoSpace, "disk is full", "unmount", mnt)
	require.NoError(t, e.proc.Process.Signal(syscall.SIGTERM))
	<-e.done
	e.proc = nil
	e.start()
	e.ok("session", "list")
	e.fails(exitNoSpace, "replay journal of s", "mount", "s", mnt)

	require.NoError(t, os.Remove(other))
	time.Sleep(200 * time.Millisecond) // the store's next statfs
	e.ok("mount", "s", mnt)
	again, err := os.ReadFile(written[0])
	require.NoError(t, err)
	require.True(t, bytes.Equal(first, again))
	e.ok("unmount", mnt)
}
