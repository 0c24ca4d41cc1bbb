package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

func gcCommand() *cli.Command {
	return &cli.Command{
		Name:  "gc",
		Usage: "remove chunks that no session or snapshot reaches, give their space back, and report what was freed",
		Description: `Safe while sessions are mounted and written: every chunk put while gc runs
is kept, live sessions are flushed first, and captures, forks and imports
in progress finish before gc marks. When it freed anything, the store's
files are compacted so that the freed bytes leave the disk (calls to the
store wait for a moment while it reopens its database).

With --remote REMOTE, gc runs on the remote instead: it deletes every
snapshot record and object that no session head there reaches (through
Parent and Origin records, as far as forget left them). Safe while other
hosts push: it waits for pushes in progress, and pushes that start while
it runs wait for it (docs/ARCHITECTURE-remote.md).

   homefs gc
   homefs gc --remote origin`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "remote", Usage: "delete what no head on `REMOTE` reaches, instead of local chunks"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 0, 0); err != nil {
				return err
			}
			if c.IsSet("remote") {
				return runRemoteGC(c.Context, client(c), os.Stdout, c.String("remote"), c.Bool("json"))
			}
			return runGC(c.Context, client(c), os.Stdout, c.Bool("json"))
		},
	}
}

func runGC(ctx context.Context, cl *api.Client, out io.Writer, asJSON bool) error {
	p := newProgress("gc", "objects", asJSON)
	res, err := cl.GC(ctx, p.show)
	p.done()
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, res)
	}
	fmt.Fprintf(out, "scanned %d chunks, %d reachable; freed %d chunks, %s (%s stored) in %s\n",
		res.Scanned, res.Reachable, res.Freed, humanBytes(res.FreedBytes), humanBytes(res.FreedStored), res.Duration.Round(1e6))
	if res.StoreBytesBefore > 0 {
		fmt.Fprintf(out, "store files: %s before, %s after (%d log files rewritten)\n",
			humanBytes(res.StoreBytesBefore), humanBytes(res.StoreBytesAfter), res.ValueLogFiles)
	}
	return nil
}
