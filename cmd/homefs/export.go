package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/archive"
)

type exportOptions struct {
	snapshot string
	dest     string // a directory, or "-" for a tar stream on stdout
}

func exportCommand() *cli.Command {
	return &cli.Command{
		Name:      "export",
		Usage:     "write a snapshot to a directory, or as a tar stream to stdout",
		ArgsUsage: "SNAPSHOT DIR|-",
		Description: `Every chunk is read from the store and verified; a damaged one stops the
export (exit 5). DIR must be empty or absent. With "-" the tar stream (PAX,
with modes, owners, times, xattrs, symlinks, hard links) goes to stdout.

   homefs export agent-1@3f2a9c1e /tmp/agent-1
   homefs export 3f2a9c1e - | tar -tv`,
		Action: func(c *cli.Context) error {
			if err := args(c, 2, 2); err != nil {
				return err
			}
			return runExport(c.Context, client(c), os.Stdout, exportOptions{snapshot: c.Args().Get(0), dest: c.Args().Get(1)})
		},
	}
}

func runExport(ctx context.Context, cl *api.Client, stdout io.Writer, o exportOptions) error {
	p := newProgress("export", "entries", false)
	defer p.done()
	if o.dest == "-" {
		return cl.Export(ctx, o.snapshot, &countingWriter{w: stdout, p: p})
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := cl.Export(ctx, o.snapshot, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	xerr := archive.Extract(ctx, pr, o.dest, func(entries, bytes int64) {
		p.show(api.Progress{Done: entries, Bytes: bytes})
	})
	if xerr != nil {
		cancel()
		pr.CloseWithError(xerr)
	} else {
		// The end-of-archive padding after the last entry.
		_, _ = io.Copy(io.Discard, pr)
	}
	eerr := <-errc
	switch {
	case xerr != nil && (eerr == nil || errors.Is(eerr, context.Canceled) || errors.Is(eerr, io.ErrClosedPipe)):
		return fmt.Errorf("export to %s: %w", o.dest, xerr)
	case eerr != nil:
		return eerr // the daemon's error says more than the pipe's
	}
	return nil
}
