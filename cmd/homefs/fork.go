package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

func forkCommand() *cli.Command {
	return &cli.Command{
		Name:      "fork",
		Usage:     "create a session from another session or one of its snapshots",
		ArgsUsage: "SOURCE[@SNAPSHOT] TARGET",
		Description: `A bare SOURCE session is captured first, so the fork starts from its state
right now. The fork shares every byte with its source (O(1)); they diverge
from there on. TARGET must not exist.

   homefs fork agent-1 agent-1-retry
   homefs fork agent-1@3f2a9c1e agent-1-alt`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 2, 2); err != nil {
				return err
			}
			return runFork(c.Context, client(c), os.Stdout, c.Args().Get(0), c.Args().Get(1), c.Bool("json"))
		},
	}
}

func runFork(ctx context.Context, cl *api.Client, out io.Writer, source, target string, asJSON bool) error {
	s, err := cl.Fork(ctx, api.ForkRequest{Source: source, Target: target})
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, s)
	}
	from := source
	if s.Origin != nil {
		from = s.Origin.Session + "@" + shortID(s.Origin.Snapshot)
	}
	fmt.Fprintf(out, "forked %s from %s\n", s.Name, from)
	printDerived(out, os.Stderr, s)
	return nil
}
