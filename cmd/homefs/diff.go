package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

func diffCommand() *cli.Command {
	return &cli.Command{
		Name:      "diff",
		Usage:     "list paths added, removed or changed between two sessions or snapshots",
		ArgsUsage: "A B",
		Description: `A and B are sessions (their current trees, including unflushed writes) or
snapshots (ID, prefix, SESSION@ID). Only what differs is read.

   homefs diff agent-1 agent-1-retry
   homefs diff @3f2a9c1e agent-1`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 2, 2); err != nil {
				return err
			}
			return runDiff(c.Context, client(c), os.Stdout, c.Args().Get(0), c.Args().Get(1), c.Bool("json"))
		},
	}
}

func runDiff(ctx context.Context, cl *api.Client, out io.Writer, a, b string, asJSON bool) error {
	d, err := cl.Diff(ctx, a, b)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, d)
	}
	fmt.Fprintf(out, "--- %s\n+++ %s\n", d.A, d.B)
	rows := make([][]string, 0, len(d.Entries))
	for _, e := range d.Entries {
		mark := map[string]string{api.Added: "+", api.Removed: "-", api.Changed: "M"}[e.Change]
		size := ""
		switch e.Change {
		case api.Added:
			size = humanBytes(e.NewSize)
		case api.Removed:
			size = humanBytes(e.OldSize)
		default:
			size = humanBytes(e.OldSize) + " -> " + humanBytes(e.NewSize)
		}
		if e.Kind != "file" && e.Kind != "symlink" {
			size = "-" // a directory, a fifo, a socket or a device node
		}
		rows = append(rows, []string{mark, e.Kind, size, e.Path})
	}
	if len(rows) == 0 {
		fmt.Fprintln(out, "no differences")
		return nil
	}
	return table(out, []string{"", "KIND", "SIZE", "PATH"}, rows)
}
