package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/manifest"
)

func sessionCommand() *cli.Command {
	return &cli.Command{
		Name:  "session",
		Usage: "create, list and remove sessions",
		Subcommands: []*cli.Command{
			sessionCreateCommand(),
			sessionSetCommand(),
			sessionListCommand(),
			sessionRmCommand(),
		},
	}
}

func sessionCreateCommand() *cli.Command {
	return &cli.Command{
		Name:      "create",
		Usage:     "create a session, empty or from a snapshot",
		ArgsUsage: "NAME",
		Description: `Creates session NAME with an empty tree, or with --from the tree of a
snapshot (ID, unique prefix, SESSION@ID, or SESSION for its last snapshot).
Names are 1-128 bytes of [A-Za-z0-9._-], not starting with '.' or '-'.

The layout flags record where the session's parts belong: which subtree
is which provider's home (otherwise homes are found by content), and the
canonical paths at which homefs run shows the homes and the workspace, so
that the absolute paths providers store stay valid in every fork, restore
and move. Forks, snapshots, pushes and pulls carry the layout; a session
made from a snapshot takes the snapshot's unless flags are given.
--owner makes the session's root directory an agent user's.

   homefs session create agent-1 --owner agent --home-at codex=/home/agent/.codex --workspace-at /workspace
   homefs session create retry --from agent-1@3f2a9c1e`,
		Flags: append([]cli.Flag{&cli.StringFlag{Name: "from", Usage: "snapshot to start from"}, ownerFlag("owner of the session's root directory"), jsonFlag}, layoutFlags()...),
		Action: func(c *cli.Context) error {
			if err := args(c, 1, 1); err != nil {
				return err
			}
			owner, err := parseOwner(c.String("owner"))
			if err != nil {
				return err
			}
			var layout *manifest.Layout
			if layoutChanged(c) {
				if layout, err = applyLayoutFlags(c, nil); err != nil {
					return err
				}
			}
			return runSessionCreate(c.Context, client(c), os.Stdout, sessionCreateOptions{
				name: c.Args().First(), from: c.String("from"), json: c.Bool("json"),
				owner: owner, layout: layout,
			})
		},
	}
}

func sessionSetCommand() *cli.Command {
	return &cli.Command{
		Name:      "set",
		Usage:     "change a session's layout (homes, workspace, canonical paths)",
		ArgsUsage: "NAME",
		Description: `Changes what the layout flags name and keeps the rest; --clear starts from
an empty layout. The next capture records the new layout.

   homefs session set agent-1 --home codex=home/.codex --home-at codex=/home/agent/.codex
   homefs session set agent-1 --workspace-at /workspace`,
		Flags: append([]cli.Flag{&cli.BoolFlag{Name: "clear", Usage: "start from an empty layout"}, jsonFlag}, layoutFlags()...),
		Action: func(c *cli.Context) error {
			if err := args(c, 1, 1); err != nil {
				return err
			}
			return runSessionSet(c, client(c), os.Stdout, c.Args().First())
		},
	}
}

func sessionListCommand() *cli.Command {
	return &cli.Command{
		Name:        "list",
		Aliases:     []string{"ls"},
		Usage:       "list sessions with their last snapshot and mounts",
		Description: "   homefs session list --json",
		Flags:       []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 0, 0); err != nil {
				return err
			}
			return runSessionList(c.Context, client(c), os.Stdout, c.Bool("json"))
		},
	}
}

func sessionRmCommand() *cli.Command {
	return &cli.Command{
		Name:      "rm",
		Usage:     "remove a session (its snapshots stay, unless --purge)",
		ArgsUsage: "NAME",
		Description: `Removes the session's head. It must not be mounted. Its snapshots stay and
can still be forked or restored; gc frees what nothing reaches any more.

With --purge, every snapshot the session captured is forgotten with it, in
the same operation (refused while a mount shows one of them). Sessions
forked from it keep working (their heads hold their own trees) and their
log shows the origin as forgotten. Run gc afterwards to free the space and
erase the bytes from the store's files.

   homefs session rm agent-1
With --purge --remote REMOTE the session is purged on the remote instead:
its head there and every snapshot record of it are deleted (the local
session is untouched); gc --remote then deletes the objects.

   homefs session rm --purge agent-1 && homefs gc
   homefs session rm --purge --remote origin agent-1 && homefs gc --remote origin`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "purge", Usage: "forget every snapshot of the session too"},
			&cli.StringFlag{Name: "remote", Usage: "with --purge: purge the session on `REMOTE` instead"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 1, 1); err != nil {
				return err
			}
			if c.IsSet("remote") {
				if !c.Bool("purge") {
					return usageError{fmt.Errorf("session rm --remote needs --purge (a remote session is its snapshots)")}
				}
				return runRemotePurge(c.Context, client(c), os.Stdout, c.String("remote"), c.Args().First(), c.Bool("json"))
			}
			return runSessionRm(c.Context, client(c), os.Stdout, c.Args().First(), c.Bool("purge"), c.Bool("json"))
		},
	}
}

type sessionCreateOptions struct {
	name, from string
	json       bool
	owner      *api.Owner
	layout     *manifest.Layout
}

func runSessionCreate(ctx context.Context, cl *api.Client, out io.Writer, o sessionCreateOptions) error {
	s, err := cl.CreateSession(ctx, api.CreateSessionRequest{Name: o.name, From: o.from, Owner: o.owner, Layout: o.layout})
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, s)
	}
	fmt.Fprintf(out, "created session %s\n", s.Name)
	printDerived(out, os.Stderr, s)
	return nil
}

func runSessionSet(c *cli.Context, cl *api.Client, out io.Writer, name string) error {
	ctx := c.Context
	var base *manifest.Layout
	if !c.Bool("clear") {
		list, err := cl.Sessions(ctx)
		if err != nil {
			return err
		}
		found := false
		for _, s := range list {
			if s.Name == name {
				base, found = s.Layout, true
			}
		}
		if !found {
			return &api.Error{Code: api.CodeNotFound, Message: "no session " + name}
		}
	}
	layout, err := applyLayoutFlags(c, base)
	if err != nil {
		return err
	}
	s, err := cl.SetLayout(ctx, name, layout)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(out, s)
	}
	fmt.Fprintf(out, "%s: layout %s\n", s.Name, layoutString(s.Layout))
	return nil
}

func runSessionList(ctx context.Context, cl *api.Client, out io.Writer, asJSON bool) error {
	list, err := cl.Sessions(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, list)
	}
	rows := make([][]string, 0, len(list))
	for _, s := range list {
		origin := "-"
		if s.Origin != nil {
			origin = s.Origin.Session + "@" + shortID(s.Origin.Snapshot)
		}
		snap := "-"
		if s.Snapshot != "" {
			snap = shortID(s.Snapshot)
		}
		mounts := "-"
		if len(s.Mounts) > 0 {
			mounts = strings.Join(s.Mounts, ",")
		}
		rows = append(rows, []string{s.Name, snap, origin, ago(s.Updated), mounts, layoutString(s.Layout)})
	}
	return table(out, []string{"SESSION", "SNAPSHOT", "ORIGIN", "UPDATED", "MOUNTED AT", "LAYOUT"}, rows)
}

func runSessionRm(ctx context.Context, cl *api.Client, out io.Writer, name string, purge, asJSON bool) error {
	res, err := cl.RemoveSession(ctx, name, purge)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, res)
	}
	if purge {
		fmt.Fprintf(out, "removed session %s and forgot its %d snapshots; run homefs gc to free their space\n", name, len(res.Forgotten))
	}
	return nil
}
