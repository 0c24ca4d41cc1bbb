package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"homefs/internal/daemon"
)

func fsckCommand() *cli.Command {
	return &cli.Command{
		Name:  "fsck",
		Usage: "verify every node and chunk that a session or snapshot reaches",
		Description: `Reads and re-hashes every reachable object; reports each problem with its
session or snapshot and path, and exits 5 if there is any.

   homefs fsck`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 0, 0); err != nil {
				return err
			}
			return runFsck(c.Context, client(c), os.Stdout, c.Bool("json"))
		},
	}
}

func runFsck(ctx context.Context, cl *daemon.Client, out io.Writer, asJSON bool) error {
	p := newProgress("fsck", "objects", asJSON)
	rep, err := cl.Fsck(ctx, p.show)
	p.done()
	if err != nil {
		return err
	}
	if asJSON {
		if err := printJSON(out, rep); err != nil {
			return err
		}
	} else {
		for _, pr := range rep.Problems {
			fmt.Fprintln(out, pr.String())
		}
		fmt.Fprintf(out, "checked %d sessions, %d snapshots, %d objects (%s): %d problems\n",
			rep.Sessions, rep.Snapshots, rep.Objects, humanBytes(rep.Bytes), len(rep.Problems))
	}
	if len(rep.Problems) > 0 {
		return errProblems
	}
	return nil
}
