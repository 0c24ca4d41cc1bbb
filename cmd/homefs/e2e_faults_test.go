package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// storeSnapshot reads every file of the store's directory.
func storeSnapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := make(map[string][]byte)
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		if e.IsDir() || e.Name() == "LOCK" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		m[e.Name()] = b
	}
	return m
}

// TestDamagedValueLog flips one byte early in the newest value log: Badger
// would cut the log there at the next start and drop every chunk after
// it, silently. serve refuses the store (exit 8) and changes no file;
// serve --salvage keeps the damaged log, starts, and fsck reports what
// was lost.
func TestDamagedValueLog(t *testing.T) {
	needFUSE(t)
	e := newEnv(t)
	e.start()
	mnt := e.mkdir("mnt")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)
	rng := rand.New(rand.NewPCG(3, 3))
	data := make([]byte, 256<<10)
	for i := 0; i < 40; i++ {
		for k := range data {
			data[k] = byte(rng.Uint32())
		}
		require.NoError(t, os.WriteFile(filepath.Join(mnt, fmt.Sprintf("f%02d", i)), data, 0o644))
	}
	e.ok("capture", "s")
	e.ok("unmount", mnt)
	e.stop()

	store := filepath.Join(e.root, "store")
	vlogs, err := filepath.Glob(filepath.Join(store, "*.vlog"))
	require.NoError(t, err)
	require.NotEmpty(t, vlogs)
	sort.Strings(vlogs)
	newest := vlogs[len(vlogs)-1]
	b, err := os.ReadFile(newest)
	require.NoError(t, err)
	require.Greater(t, len(b), 4<<20, "the chunks are in the newest value log")
	b[64<<10] ^= 0x01
	require.NoError(t, os.WriteFile(newest, b, 0o600))
	before := storeSnapshot(t, store)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, homefsBin, "serve", "--fuse-uring=off")
	cmd.Env = append(os.Environ(), "HOMEFS_ROOT="+e.root)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "serve on a damaged store: %v\n%s", err, stderr.String())
	require.Equal(t, exitDamaged, exit.ExitCode(), stderr.String())
	require.Contains(t, stderr.String(), filepath.Base(newest))
	require.Contains(t, stderr.String(), "--salvage")
	after := storeSnapshot(t, store)
	for name, content := range before {
		require.True(t, bytes.Equal(content, after[name]), "refusing the store changed %s", name)
	}

	e.start("--salvage")
	require.Contains(t, e.logs.String(), "salvaging")
	kept, err := filepath.Glob(filepath.Join(store, "damaged-*", filepath.Base(newest)))
	require.NoError(t, err)
	require.Len(t, kept, 1)
	orig, err := os.ReadFile(kept[0])
	require.NoError(t, err)
	require.True(t, bytes.Equal(orig, b), "the kept copy is the damaged log as it was")
	r := e.fails(exitCorrupt, "problem", "fsck")
	t.Logf("fsck after the salvage:\n%s", r.stdout)
}

// TestFUSEDescriptorsCloseOnExec: no /dev/fuse descriptor of the daemon
// survives an exec, on either transport, so a process the daemon starts
// never keeps a mount's connection alive.
func TestFUSEDescriptorsCloseOnExec(t *testing.T) {
	needFUSE(t)
	for _, transport := range []string{"off", "on"} {
		t.Run("uring="+transport, func(t *testing.T) {
			e := newEnv(t)
			e.start("--fuse-uring=" + transport)
			mnt := e.mkdir("mnt")
			e.ok("session", "create", "s")
			e.ok("mount", "s", mnt)
			pid := e.proc.Process.Pid
			fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
			require.NoError(t, err)
			seen := 0
			for _, fd := range fds {
				target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
				if err != nil || target != "/dev/fuse" {
					continue
				}
				seen++
				info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
				require.NoError(t, err)
				var flags uint64
				for _, line := range bytes.Split(info, []byte("\n")) {
					if v, ok := bytes.CutPrefix(line, []byte("flags:")); ok {
						_, err := fmt.Sscanf(string(bytes.TrimSpace(v)), "%o", &flags)
						require.NoError(t, err)
					}
				}
				require.NotZero(t, flags&0o2000000, "/dev/fuse descriptor %s without O_CLOEXEC (flags %o)", fd.Name(), flags)
			}
			require.NotZero(t, seen, "the daemon holds no /dev/fuse descriptor")
			e.ok("unmount", mnt)
		})
	}
}
