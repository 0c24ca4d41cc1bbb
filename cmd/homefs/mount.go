package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

type mountOptions struct {
	session  string // SESSION[/SUBTREE]
	dir      string
	readOnly bool
	snapshot string
	remote   string
	lease    string
	private  bool
	dev      bool
	noAtime  bool
	owner    *api.Owner
	json     bool
}

func mountCommand() *cli.Command {
	return &cli.Command{
		Name:      "mount",
		Usage:     "mount a session (or a subtree, or a snapshot) at a directory",
		ArgsUsage: "SESSION[/SUBTREE] DIR",
		Description: `The daemon serves the mount; it lasts until "homefs unmount DIR" or until the
daemon stops. Writes are copy-on-write: nothing is copied until it changes.
With --snapshot the mount shows that snapshot of the session, read-only.
With --remote the snapshot (--snapshot, else SESSION: a snapshot id or a
session's head on the remote) is pulled first, tree only, and mounted
read-only; file chunks are fetched, verified and kept on first read (a
chunk the remote lost reads as EIO). Fork or "session create --from" it to
write.
DIR must be an existing directory, not already a mountpoint, and not inside
the daemon's root. A SUBTREE that does not exist is created, with its missing
parents (mode 0755, owned like the session root); a read-only or snapshot
mount of one fails (exit 3).
Every user may enter a mount, with the kernel checking modes and owners as
on ext4 (allow_other, default_permissions); --private makes one only the
daemon's user may enter. --owner gives the mount's root directory to an
agent user (a live session's, recorded like a chown).
Fifos, Unix sockets and device nodes are entries like any other, but a
mount is nodev: opening a device node on it fails (EACCES), whoever made
it. --dev lets device nodes open their devices; only a daemon running as
root may mount so (exit 2 otherwise). Making a device node needs
CAP_MKNOD, as on ext4.
Reads set access times as relatime does on ext4 (the first read after a
change, or a day after the last); --noatime makes them set none.
--lease REMOTE takes the session's lease on REMOTE before mounting (see
"homefs lease"): while another host holds it the mount is refused (exit 4,
naming the holder). The daemon renews the lease while it runs; the last
unmount of the session that holds it releases it.

   homefs mount agent-1 /home/agent/.codex
   homefs mount agent-1/workspace /srv/ws --read-only
   homefs mount agent-1 /mnt/old --snapshot 3f2a9c1e
   homefs mount --remote origin agent-1 /mnt/from-a
   homefs mount --lease origin agent-1 /home/agent/.codex`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "read-only", Aliases: []string{"ro"}, Usage: "refuse writes"},
			&cli.StringFlag{Name: "snapshot", Usage: "mount this snapshot of the session (read-only)"},
			&cli.StringFlag{Name: "remote", Usage: "pull the snapshot from this remote first and read its chunks lazily (read-only)"},
			&cli.StringFlag{Name: "lease", Usage: "take the session's lease on this `REMOTE` first (refused, exit 4, while another host holds it); the unmount releases it"},
			&cli.BoolFlag{Name: "private", Usage: "only the daemon's user may enter the mount"},
			&cli.BoolFlag{Name: "dev", Usage: "let device nodes on the mount open their devices (a root daemon only)"},
			&cli.BoolFlag{Name: "noatime", Usage: "reads set no access time (mount -o noatime)"},
			ownerFlag("owner of the mount's root directory"),
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 2, 2); err != nil {
				return err
			}
			owner, err := parseOwner(c.String("owner"))
			if err != nil {
				return err
			}
			return runMount(c.Context, client(c), os.Stdout, mountOptions{
				session: c.Args().Get(0), dir: c.Args().Get(1),
				readOnly: c.Bool("read-only"), snapshot: c.String("snapshot"), remote: c.String("remote"), lease: c.String("lease"), json: c.Bool("json"),
				private: c.Bool("private"), dev: c.Bool("dev"), noAtime: c.Bool("noatime"), owner: owner,
			})
		},
	}
}

func runMount(ctx context.Context, cl *api.Client, out io.Writer, o mountOptions) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	m, err := cl.Mount(ctx, api.MountRequest{Session: o.session, Dir: dir, ReadOnly: o.readOnly, Snapshot: o.snapshot, Remote: o.remote, Lease: o.lease, Private: o.private, Dev: o.dev, NoAtime: o.noAtime, Owner: o.owner})
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, m)
	}
	what := m.Session
	if m.Subtree != "" {
		what += "/" + m.Subtree
	}
	if m.Snapshot != "" {
		what += "@" + shortID(m.Snapshot)
	}
	if m.Remote != "" {
		what += " from remote " + m.Remote
	}
	mode := "read-write"
	if m.ReadOnly {
		mode = "read-only"
	}
	if m.Lease != "" {
		mode += ", lease held on " + m.Lease
	}
	fmt.Fprintf(out, "mounted %s at %s (%s)\n", what, m.Dir, mode)
	return nil
}
