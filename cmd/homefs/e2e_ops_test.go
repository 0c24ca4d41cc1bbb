package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
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

func (e *env) status(args ...string) api.Status {
	e.t.Helper()
	var st api.Status
	out := e.ok(append([]string{"status", "--json"}, args...)...)
	require.NoError(e.t, json.Unmarshal([]byte(out), &st), out)
	return st
}

// TestStatus: homefs status reports the daemon, its transport and store,
// the bytes a flush would store per mount (more than 0 after a write, 0
// after a capture or an fsync, with a newer last flush), and the remotes,
// checked or not.
func TestStatus(t *testing.T) {
	e := newEnv(t)
	e.daemonEnv = []string{"AWS_ACCESS_KEY_ID=homefs-test", "AWS_SECRET_ACCESS_KEY=homefs-test-secret"}
	e.start()
	mnt := e.mkdir("m")
	e.ok("session", "create", "s")
	e.ok("mount", "s", mnt)
	ro := e.mkdir("ro")
	e.ok("mount", "s", ro, "--read-only")
	// Nothing listens on port 1: the check fails at once.
	e.ok("remote", "add", "gone", "s3://bucket/p", "--endpoint", "http://127.0.0.1:1")

	st := e.status()
	require.NotEmpty(t, st.Version)
	require.Equal(t, e.proc.Process.Pid, st.PID)
	require.Greater(t, st.UptimeSeconds, 0.0)
	require.Equal(t, "on", st.Transport.Mode)
	require.Equal(t, filepath.Join(e.root, "store"), st.Store.Dir)
	require.Greater(t, st.Store.Bytes, int64(0))
	require.Greater(t, st.Store.FreeBytes, int64(0))
	require.GreaterOrEqual(t, st.Store.TotalBytes, st.Store.FreeBytes)
	require.Len(t, st.Mounts, 2)
	mount := func(st api.Status, dir string) api.MountStatus {
		for _, m := range st.Mounts {
			if m.Dir == dir {
				return m
			}
		}
		t.Fatalf("no mount %s in %+v", dir, st.Mounts)
		return api.MountStatus{}
	}
	require.True(t, mount(st, ro).ReadOnly)
	require.Zero(t, mount(st, ro).DirtyBytes)
	require.NotEmpty(t, mount(st, mnt).Transport)
	require.Len(t, st.Remotes, 1)
	require.Equal(t, api.RemoteUnreachable, st.Remotes[0].State)
	require.NotEmpty(t, st.Remotes[0].Error)
	require.Equal(t, api.RemoteNotChecked, e.status("--no-remote-check").Remotes[0].State)

	// written writes through f and returns the status that shows it
	// unflushed; the periodic flush (every 5 s) may come between the two,
	// then it writes again.
	written := func(f *os.File) api.MountStatus {
		for range 5 {
			before := mount(e.status("--no-remote-check"), mnt).LastFlush
			_, err := f.Write(make([]byte, 50_000))
			require.NoError(t, err)
			m := mount(e.status("--no-remote-check"), mnt)
			if m.LastFlush.Equal(before) {
				return m
			}
		}
		t.Fatal("every write was flushed before status saw it")
		return api.MountStatus{}
	}
	f, err := os.OpenFile(filepath.Join(mnt, "f"), os.O_RDWR|os.O_CREATE, 0o644)
	require.NoError(t, err)
	defer f.Close()
	m := written(f)
	require.Greater(t, m.DirtyBytes, int64(0))
	require.Greater(t, m.DirtyEntries, 0)

	e.ok("capture", "s")
	after := mount(e.status("--no-remote-check"), mnt)
	require.Zero(t, after.DirtyBytes)
	require.Zero(t, after.DirtyEntries)
	require.True(t, after.LastFlush.After(m.LastFlush), "%v after %v", after.LastFlush, m.LastFlush)

	// An fsync of a file the head has goes to the journal: durable, not
	// flushed; the periodic flush stores it within seconds.
	m = written(f)
	require.NoError(t, f.Sync())
	synced := mount(e.status("--no-remote-check"), mnt)
	if synced.LastFlush.Equal(m.LastFlush) {
		require.Greater(t, synced.JournalBytes, int64(50_000))
		require.Greater(t, synced.DirtyBytes, int64(0))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		// A flush stores the buffers before it resets the journal: a
		// status between the two shows the journal still full.
		after = mount(e.status("--no-remote-check"), mnt)
		if after.DirtyBytes == 0 && after.JournalBytes == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "no flush within 20 s: %+v", after)
		time.Sleep(100 * time.Millisecond)
	}
	require.Zero(t, after.JournalBytes)
	require.Zero(t, after.DirtyEntries)
	require.True(t, after.LastFlush.After(m.LastFlush), "%v after %v", after.LastFlush, m.LastFlush)

	out := e.ok("status")
	for _, want := range []string{"version", "transport", "MOUNT", "LAST FLUSH", mnt, "gone", "unreachable"} {
		require.Contains(t, out, want)
	}
}
