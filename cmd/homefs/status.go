package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

type statusOptions struct {
	asJSON        bool
	noRemoteCheck bool
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show the daemon: version, transport, store, mounts with unflushed bytes, remotes",
		Description: `Shows the daemon's version, pid and uptime; how mounts reach the kernel
(FUSE over io_uring or /dev/fuse) and whether the daemon turned the host's
io_uring switch on; the store directory, its size and the free space of its
filesystem; every mount with its session, subtree, mode, the bytes a flush
would store now (DIRTY; what of it an fsync already made durable in the
session's journal shows as "journaled") and when the session was last flushed
durably (a capture, unmount, the periodic flush every 5 s; an fsync whose
writes go to the journal does not flush); and
every remote, checked with one listing bounded by 3 s (all at once) unless
--no-remote-check. It exits 0 whenever the daemon answers, 6 when it does not.

   homefs status --json
   homefs status --no-remote-check`,
		Flags: []cli.Flag{
			jsonFlag,
			&cli.BoolFlag{Name: "no-remote-check", Usage: "do not contact the remotes (they show as \"not checked\")"},
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 0, 0); err != nil {
				return err
			}
			return runStatus(c.Context, client(c), os.Stdout, statusOptions{asJSON: c.Bool("json"), noRemoteCheck: c.Bool("no-remote-check")})
		},
	}
}

func runStatus(ctx context.Context, cl *api.Client, out io.Writer, o statusOptions) error {
	s, err := cl.StatusWith(ctx, api.StatusOptions{CheckRemotes: !o.noRemoteCheck})
	if err != nil {
		return err
	}
	if o.asJSON {
		return printJSON(out, s)
	}
	uptime := time.Duration(s.UptimeSeconds * float64(time.Second)).Round(time.Second)
	rows := [][]string{
		{"version", s.Version},
		{"pid", fmt.Sprint(s.PID)},
		{"uptime", fmt.Sprintf("%v (since %s)", uptime, ago(s.Started))},
		{"root", s.Root},
		{"socket", s.Socket},
		{"transport", transportLine(s.Transport)},
		{"store", fmt.Sprintf("%s: %s, %s free of %s", s.Store.Dir, humanBytes(s.Store.Bytes), humanBytes(s.Store.FreeBytes), humanBytes(s.Store.TotalBytes))},
	}
	if err := table(out, nil, rows); err != nil {
		return err
	}
	if len(s.Mounts) > 0 {
		fmt.Fprintln(out)
		var mrows [][]string
		for _, m := range s.Mounts {
			what := m.Session
			if m.Snapshot != "" {
				what += "@" + shortID(m.Snapshot)
			}
			sub := m.Subtree
			if sub == "" {
				sub = "-"
			}
			mode := "rw"
			if m.ReadOnly {
				mode = "ro"
			}
			if m.Private {
				mode += ",private"
			}
			dirty, flushed := "-", "-"
			if !m.ReadOnly {
				dirty = humanBytes(m.DirtyBytes)
				if m.DirtyEntries > 0 {
					dirty += fmt.Sprintf(" (%d changed)", m.DirtyEntries)
				}
				if m.JournalBytes > 0 {
					dirty += fmt.Sprintf(", %s journaled", humanBytes(m.JournalBytes))
				}
				flushed = ago(m.LastFlush)
			}
			mrows = append(mrows, []string{m.Dir, what, sub, mode, m.Transport, dirty, flushed})
		}
		if err := table(out, []string{"MOUNT", "SESSION", "SUBTREE", "MODE", "TRANSPORT", "DIRTY", "LAST FLUSH"}, mrows); err != nil {
			return err
		}
	}
	if len(s.Remotes) > 0 {
		fmt.Fprintln(out)
		var rrows [][]string
		for _, r := range s.Remotes {
			state := r.State
			switch r.State {
			case api.RemoteReachable:
				state += fmt.Sprintf(" (%d ms)", r.LatencyMS)
			case api.RemoteUnreachable:
				state += ": " + r.Error
			}
			ep := r.Endpoint
			if ep == "" {
				ep = "-"
			}
			rrows = append(rrows, []string{r.Name, r.URL, ep, state})
		}
		if err := table(out, []string{"REMOTE", "URL", "ENDPOINT", "STATE"}, rrows); err != nil {
			return err
		}
	}
	return nil
}

// transportLine says how mounts reach the kernel and what the daemon did
// to the host's switch.
func transportLine(t api.TransportStatus) string {
	switch {
	case t.Mode == "off":
		return "/dev/fuse (--fuse-uring=off)"
	case t.Switch == "":
		return fmt.Sprintf("/dev/fuse: the kernel has no FUSE over io_uring (--fuse-uring=%s)", t.Mode)
	case t.Switch != "Y":
		return fmt.Sprintf("/dev/fuse: the host's io_uring switch is off (--fuse-uring=%s)", t.Mode)
	case t.SwitchChanged:
		return fmt.Sprintf("io_uring: switch turned on by this daemon, off again at exit (--fuse-uring=%s)", t.Mode)
	}
	return fmt.Sprintf("io_uring: switch on, as the host set it (--fuse-uring=%s)", t.Mode)
}
