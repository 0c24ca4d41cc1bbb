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

type exportNativeOptions struct {
	snapshot string
	dir      string
	json     bool
}

func exportNativeCommand() *cli.Command {
	return &cli.Command{
		Name:      "export-native",
		Usage:     "write a snapshot in the TypeScript harness's native format",
		ArgsUsage: "SNAPSHOT DIR",
		Description: `Writes DIR/blobs/<sha256 hex> and DIR/snapshot.json (durably, the JSON last:
its presence means a whole export). Only the paths the format allows are
written (workspace/**, Claude, Codex and Pi rollouts); everything else is
listed as left out, a directory with nothing exportable as one "dir/" line.
DIR must be empty or absent, and not inside a homefs mount.

   homefs export-native agent-1@3f2a9c1e /srv/out`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 2, 2); err != nil {
				return err
			}
			return runExportNative(c.Context, client(c), os.Stdout, exportNativeOptions{
				snapshot: c.Args().Get(0), dir: c.Args().Get(1), json: c.Bool("json"),
			})
		},
	}
}

func runExportNative(ctx context.Context, cl *api.Client, out io.Writer, o exportNativeOptions) error {
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return err
	}
	res, err := cl.ExportNative(ctx, api.ExportNativeRequest{Snapshot: o.snapshot, Dir: dir})
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, res)
	}
	fmt.Fprintf(out, "exported %s to %s\n", shortID(res.Snapshot), res.Manifest)
	if len(res.LeftOut) == 0 {
		fmt.Fprintln(out, "nothing left out")
		return nil
	}
	fmt.Fprintf(out, "left out (%d, not in the native format):\n", len(res.LeftOut))
	for _, p := range res.LeftOut {
		fmt.Fprintf(out, "  %s\n", p)
	}
	return nil
}
