package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

type pullOptions struct {
	spec   string // a snapshot id or prefix, or a session (its remote head)
	remote string
	all    bool
	json   bool
}

func pullCommand() *cli.Command {
	return &cli.Command{
		Name:      "pull",
		Usage:     "bring a snapshot from a remote: its tree now, its file chunks on first read",
		ArgsUsage: "SNAPSHOT|SESSION [REMOTE]",
		Description: `Fetches the snapshot record, its lineage and every tree node, verifies each
and registers the snapshots here; file chunks are fetched (and verified and
kept) when first read, unless --all fetches them now so the snapshot reads
without the remote. A SESSION pulls its remote head. Then mount --snapshot,
fork, restore, session create --from and log work on it.

   homefs pull agent-1 origin
   homefs pull 3f2a9c1e --all`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "all", Usage: "fetch every file chunk now"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 1, 2); err != nil {
				return err
			}
			return runPull(c.Context, client(c), os.Stdout, pullOptions{
				spec: c.Args().Get(0), remote: c.Args().Get(1), all: c.Bool("all"), json: c.Bool("json"),
			})
		},
	}
}

func runPull(ctx context.Context, cl *api.Client, out io.Writer, o pullOptions) error {
	p := newProgress("pull", "objects", o.json)
	res, err := cl.Pull(ctx, api.PullRequest{Spec: o.spec, Remote: o.remote, All: o.all}, p.show)
	p.done()
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, res)
	}
	what := "tree only, chunks on first read"
	if res.All {
		what = "complete"
	}
	fmt.Fprintf(out, "pulled %s of %s from %s (%s): %d records, %d nodes, %d objects fetched (%s)\n",
		res.Snapshot, res.Session, res.Remote, what, res.Records, res.Nodes, res.Fetched, humanBytes(res.FetchedBytes))
	return nil
}
