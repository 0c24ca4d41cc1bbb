package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"homefs/internal/daemon"
)

func sessionCommand() *cli.Command {
	return &cli.Command{
		Name:  "session",
		Usage: "create, list and remove sessions",
		Subcommands: []*cli.Command{
			{
				Name:      "create",
				Usage:     "create a session, empty or from a snapshot",
				ArgsUsage: "NAME",
				Description: `Creates session NAME with an empty tree, or with --from the tree of a
snapshot (ID, unique prefix, SESSION@ID, or SESSION for its last snapshot).
Names are 1-128 bytes of [A-Za-z0-9._-], not starting with '.' or '-'.

   homefs session create agent-1
   homefs session create retry --from agent-1@3f2a9c1e`,
				Flags: []cli.Flag{&cli.StringFlag{Name: "from", Usage: "snapshot to start from"}, jsonFlag},
				Action: func(c *cli.Context) error {
					if err := args(c, 1, 1); err != nil {
						return err
					}
					return runSessionCreate(c.Context, client(c), os.Stdout, sessionCreateOptions{
						name: c.Args().First(), from: c.String("from"), json: c.Bool("json"),
					})
				},
			},
			{
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
			},
			{
				Name:      "rm",
				Usage:     "remove a session (its snapshots stay)",
				ArgsUsage: "NAME",
				Description: `Removes the session's head. It must not be mounted. Its snapshots stay and
can still be forked or restored; gc frees what nothing reaches any more.

   homefs session rm agent-1`,
				Action: func(c *cli.Context) error {
					if err := args(c, 1, 1); err != nil {
						return err
					}
					return runSessionRm(c.Context, client(c), c.Args().First())
				},
			},
		},
	}
}

type sessionCreateOptions struct {
	name, from string
	json       bool
}

func runSessionCreate(ctx context.Context, cl *daemon.Client, out io.Writer, o sessionCreateOptions) error {
	s, err := cl.CreateSession(ctx, daemon.CreateSessionRequest{Name: o.name, From: o.from})
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, s)
	}
	fmt.Fprintf(out, "created session %s\n", s.Name)
	return nil
}

func runSessionList(ctx context.Context, cl *daemon.Client, out io.Writer, asJSON bool) error {
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
		rows = append(rows, []string{s.Name, snap, origin, ago(s.Updated), mounts})
	}
	return table(out, []string{"SESSION", "SNAPSHOT", "ORIGIN", "UPDATED", "MOUNTED AT"}, rows)
}

func runSessionRm(ctx context.Context, cl *daemon.Client, name string) error {
	return cl.RemoveSession(ctx, name)
}
