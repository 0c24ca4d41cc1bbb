package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

func restoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "switch a session to a snapshot, atomically, even while mounted",
		ArgsUsage: "SESSION SNAPSHOT",
		Description: `Checks that the snapshot is complete first. Mounts see the restored tree at
once; open files keep the content they had. Changes since the last capture
are discarded (capture first to keep them).

   homefs restore agent-1 3f2a9c1e`,
		Action: func(c *cli.Context) error {
			if err := args(c, 2, 2); err != nil {
				return err
			}
			return runRestore(c.Context, client(c), os.Stdout, c.Args().Get(0), c.Args().Get(1))
		},
	}
}

func runRestore(ctx context.Context, cl *api.Client, out io.Writer, session, snapshot string) error {
	s, err := cl.Restore(ctx, session, snapshot)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "restored %s to %s\n", session, snapshot)
	printDerived(out, os.Stderr, s)
	return nil
}
