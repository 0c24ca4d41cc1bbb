package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

type pushOptions struct {
	spec   string // SESSION (its last snapshot) or a snapshot
	remote string // "" for the only one
	repair bool   // read back what the remote has, upload again what is bad
	json   bool
}

func pushCommand() *cli.Command {
	return &cli.Command{
		Name:      "push",
		Usage:     "make a snapshot durable on a remote and move its session's remote head",
		ArgsUsage: "SESSION|SNAPSHOT [REMOTE]",
		Description: `Uploads what the remote lacks (chunks, then tree nodes, then the snapshot
record: once that is written, the snapshot survives the loss of this host),
then moves the session's head on the remote. A SESSION pushes its last
snapshot (capture first, or use "capture --push"). If another host pushed
a snapshot of the session that this one does not descend from, the push
fails with a conflict (exit 4): pull it and fork, or push under another
session. An interrupted push completes when rerun. REMOTE may be left out
when only one is configured.

A push skips what the remote has. With --repair it reads back instead
every record, node and chunk of the snapshot and of its lineage that the
remote holds, checks each as a pull does, and uploads again from the
local store what is missing or damaged (found by "fsck --remote"); it
reports how many objects it read back intact, found missing and found
damaged.

   homefs push agent-1 origin
   homefs push agent-1@3f2a9c1e
   homefs push --repair agent-1 origin`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "repair", Usage: "read back what the remote has and upload again what is missing or damaged"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 1, 2); err != nil {
				return err
			}
			return runPush(c.Context, client(c), os.Stdout, pushOptions{spec: c.Args().Get(0), remote: c.Args().Get(1), repair: c.Bool("repair"), json: c.Bool("json")})
		},
	}
}

func runPush(ctx context.Context, cl *api.Client, out io.Writer, o pushOptions) error {
	p := newProgress("push", "objects", o.json)
	res, err := cl.Push(ctx, api.PushRequest{Spec: o.spec, Remote: o.remote, Repair: o.repair}, p.show)
	p.done()
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, res)
	}
	printPush(out, res)
	return nil
}

func printPush(out io.Writer, res *api.PushResult) {
	head := "head already there"
	if res.HeadMoved {
		head = "head moved"
	}
	fmt.Fprintf(out, "pushed %s of %s to %s: %d objects uploaded (%s), %d checked, %d records; %s\n",
		shortID(res.Snapshot), res.Session, res.Remote, res.Uploaded, humanBytes(res.UploadedBytes), res.Checked, res.Records, head)
	if res.Repair {
		fmt.Fprintf(out, "repair: %d objects read back intact, %d missing and %d damaged uploaded again\n", res.Verified, res.Missing, res.Damaged)
	}
}
