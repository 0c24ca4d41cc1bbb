package daemon

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/version"
)

// remoteCheckTimeout bounds the check of each remote: status answers in
// about this long even when a remote hangs.
const remoteCheckTimeout = 3 * time.Second

// Status reports on the daemon: version, transport, store, every mount
// with its session's unflushed changes, and the remotes. Nothing in it
// walks a session's tree; the store's size is a walk of its directory
// (Badger keeps few, large files).
func (s *Service) Status(ctx context.Context, opts api.StatusOptions) *api.Status {
	st := &api.Status{
		Version: version.String(), PID: os.Getpid(), UID: os.Getuid(), Root: s.root, Socket: s.socket,
		Started: s.started, UptimeSeconds: time.Since(s.started).Seconds(),
	}
	uh := s.eng.URingHost()
	st.Transport = api.TransportStatus{Mode: uh.Mode.String(), Switch: uh.Switch, SwitchChanged: uh.Changed}
	st.Store = storeStatus(filepath.Join(s.root, "store"))

	s.mu.Lock()
	mounts := make([]api.MountInfo, 0, len(s.mounts))
	for _, m := range s.mounts {
		mounts = append(mounts, m)
	}
	s.mu.Unlock()
	sort.Slice(mounts, func(i, j int) bool { return mounts[i].Dir < mounts[j].Dir })
	st.Mounts = make([]api.MountStatus, 0, len(mounts))
	for _, m := range mounts {
		ms := api.MountStatus{MountInfo: m}
		if !m.ReadOnly {
			if ss, ok := s.eng.SessionState(m.Session); ok {
				ms.DirtyBytes = ss.DirtyBytes + ss.StagedBytes
				ms.JournalBytes = ss.JournalBytes
				ms.DirtyEntries = ss.DirtyEntries
				ms.LastFlush = ss.LastFlush
			}
		}
		st.Mounts = append(st.Mounts, ms)
	}
	st.Remotes = s.remoteStatus(ctx, opts.CheckRemotes)
	return st
}

// storeStatus measures the store directory; what cannot be measured
// stays 0 (status reports, it does not fail).
func storeStatus(dir string) api.StoreStatus {
	st := api.StoreStatus{Dir: dir}
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // a file removed by a compaction meanwhile
		}
		if info, err := d.Info(); err == nil {
			if sys, ok := info.Sys().(*syscall.Stat_t); ok {
				st.Bytes += sys.Blocks * 512
			}
		}
		return nil
	})
	var sf syscall.Statfs_t
	if syscall.Statfs(dir, &sf) == nil {
		st.FreeBytes = int64(sf.Bavail) * sf.Bsize
		st.TotalBytes = int64(sf.Blocks) * sf.Bsize
	}
	return st
}

// remoteStatus lists the remotes, pinging each at once when check is set.
func (s *Service) remoteStatus(ctx context.Context, check bool) []api.RemoteStatus {
	cfgs := s.remotes.Registry().List()
	out := make([]api.RemoteStatus, len(cfgs))
	var wg sync.WaitGroup
	for i, c := range cfgs {
		out[i] = api.RemoteStatus{Name: c.Name, URL: c.URL, Endpoint: c.Endpoint, State: api.RemoteNotChecked}
		if !check {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, remoteCheckTimeout)
			defer cancel()
			start := time.Now()
			err := s.remotes.Ping(ctx, c.Name)
			out[i].LatencyMS = time.Since(start).Milliseconds()
			if err != nil {
				out[i].State, out[i].Error = api.RemoteUnreachable, err.Error()
				return
			}
			out[i].State = api.RemoteReachable
		}()
	}
	wg.Wait()
	return out
}
