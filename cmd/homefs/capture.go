package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"homefs/internal/daemon"
	"homefs/manifest"
)

type captureOptions struct {
	session string
	message string
	handles []string // PROVIDER=ID[@THROUGH]
	json    bool
}

func captureCommand() *cli.Command {
	return &cli.Command{
		Name:      "capture",
		Usage:     "snapshot a session, atomically across its mounts; prints the snapshot id",
		ArgsUsage: "SESSION",
		Description: `Freezes the session's current state (every write made before the command
started) as an immutable snapshot and prints its id. --handle records the
provider session the snapshot belongs to and the turn it is valid through.

   homefs capture agent-1 -m "after turn 3" --handle codex=0199a3b2-…@turn-3`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "describe the snapshot"},
			&cli.StringSliceFlag{Name: "handle", Usage: "PROVIDER=ID[@THROUGH], repeatable"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 1, 1); err != nil {
				return err
			}
			return runCapture(c.Context, client(c), os.Stdout, captureOptions{
				session: c.Args().First(), message: c.String("message"),
				handles: c.StringSlice("handle"), json: c.Bool("json"),
			})
		},
	}
}

func parseHandles(specs []string) (map[string]manifest.Handle, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	out := make(map[string]manifest.Handle, len(specs))
	for _, s := range specs {
		provider, rest, ok := strings.Cut(s, "=")
		if !ok || provider == "" || rest == "" {
			return nil, usageError{fmt.Errorf("--handle %q: want PROVIDER=ID[@THROUGH]", s)}
		}
		id, through, _ := strings.Cut(rest, "@")
		if id == "" {
			return nil, usageError{fmt.Errorf("--handle %q: empty ID", s)}
		}
		out[provider] = manifest.Handle{ID: id, Through: through}
	}
	return out, nil
}

func runCapture(ctx context.Context, cl *daemon.Client, out io.Writer, o captureOptions) error {
	handles, err := parseHandles(o.handles)
	if err != nil {
		return err
	}
	snap, err := cl.Capture(ctx, o.session, daemon.CaptureRequest{Message: o.message, Handles: handles})
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, snap)
	}
	fmt.Fprintln(out, snap.ID)
	return nil
}
