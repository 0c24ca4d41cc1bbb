package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/atomicfile"
	"github.com/homefs/homefs/internal/mountinfo"
)

// mountsFile is the record of the mounts a daemon serves, kept so that the
// next start after a crash knows which leftover mounts are its own.
const mountsFile = "mounts.json"

type mountsRecord struct {
	PID    int             `json:"pid"`
	Mounts []api.MountInfo `json:"mounts"`
}

// writeMounts replaces <root>/mounts.json durably: temp file, fsync,
// rename, fsync of the directory.
func writeMounts(root string, mounts []api.MountInfo) error {
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Dir < mounts[j].Dir })
	data, err := json.MarshalIndent(mountsRecord{PID: os.Getpid(), Mounts: mounts}, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(root, mountsFile), append(data, '\n'), 0o600)
}

func readMounts(root string) ([]api.MountInfo, error) {
	data, err := os.ReadFile(filepath.Join(root, mountsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var rec mountsRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", mountsFile, err)
	}
	return rec.Mounts, nil
}

// isMountpoint reports whether dir is the mountpoint of any mount.
func isMountpoint(dir string) (bool, error) {
	ms, err := mountinfo.Read()
	if err != nil {
		return false, err
	}
	for _, m := range ms {
		if m.Dir == dir {
			return true, nil
		}
	}
	return false, nil
}

// probeWait bounds the wait for a mount's answer at start: a dead mount
// answers ENOTCONN at once, and one whose server hangs must not hang the
// start.
const probeWait = time.Second

// cleanStaleMounts detaches the homefs mounts in the mount table that no
// server answers any more (after a crash or a kill -9 every access fails
// with ENOTCONN, and mounting at the same dir fails), recorded in
// mounts.json or not: a crash can come before the record is written, and
// the record may be lost. Each is probed with a statfs, which always
// reaches the server: one that fails with ENOTCONN is dead and detached;
// one that answers is a live mount of another daemon (several run at
// once) and left alone; one that does not answer within probeWait is
// detached only if the record names it (a connection kept open by a
// process that inherited it, with nobody serving it). It returns the dirs
// detached.
func cleanStaleMounts(root string, log *slog.Logger) ([]string, error) {
	recorded, err := readMounts(root)
	if err != nil {
		log.Warn("ignoring unreadable mount record", "err", err)
	}
	ours := make(map[string]bool, len(recorded))
	for _, m := range recorded {
		ours[m.Dir] = true
	}
	kms, err := mountinfo.Read()
	if err != nil {
		return nil, fmt.Errorf("read mount table: %w", err)
	}
	var candidates []mountinfo.Entry
	for _, km := range kms {
		if km.IsHomefs() {
			candidates = append(candidates, km)
		}
	}
	state := probe(candidates)
	var cleaned []string
	// Deepest first, so that nested mounts come off before their parents.
	sort.SliceStable(candidates, func(i, j int) bool { return len(candidates[i].Dir) > len(candidates[j].Dir) })
	detached := make(map[string]bool)
	for _, km := range candidates {
		if detached[km.Dir] {
			continue // the probe saw only the top of a stack
		}
		switch st := state[km.Dir]; {
		case st == probeDead:
		case st == probeHung && ours[km.Dir]:
		default:
			continue
		}
		if err := syscall.Unmount(km.Dir, syscall.MNT_DETACH); err != nil {
			log.Warn("could not detach stale mount", "dir", km.Dir, "source", km.Source, "err", err)
			continue
		}
		log.Info("detached stale mount", "dir", km.Dir, "source", km.Source, "recorded", ours[km.Dir])
		detached[km.Dir] = true
		cleaned = append(cleaned, km.Dir)
	}
	return cleaned, nil
}

// probeState is what a statfs of a mountpoint found.
type probeState int

const (
	probeHung probeState = iota // no answer within probeWait
	probeLive                   // answered (with anything but ENOTCONN)
	probeDead                   // ENOTCONN or ECONNABORTED: no server
)

// probe statfs's every mount at once, each in a goroutine, and waits at
// most probeWait for their answers. A probe still waiting then is
// abandoned (its goroutine ends when the mount answers or goes).
func probe(ms []mountinfo.Entry) map[string]probeState {
	type answer struct {
		dir string
		st  probeState
	}
	// Stacked mounts share a dir, whose top mount answers for it.
	dirs := make(map[string]bool, len(ms))
	for _, m := range ms {
		dirs[m.Dir] = true
	}
	answers := make(chan answer, len(dirs))
	for dir := range dirs {
		go func() {
			var st syscall.Statfs_t
			err := syscall.Statfs(dir, &st)
			if errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
				answers <- answer{dir, probeDead}
				return
			}
			answers <- answer{dir, probeLive}
		}()
	}
	state := make(map[string]probeState, len(dirs))
	timeout := time.After(probeWait)
	for range dirs {
		select {
		case a := <-answers:
			state[a.dir] = a.st
		case <-timeout:
			return state
		}
	}
	return state
}
