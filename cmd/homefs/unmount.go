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

func unmountCommand() *cli.Command {
	return &cli.Command{
		Name:      "unmount",
		Aliases:   []string{"umount"},
		Usage:     "unmount a directory mounted by the daemon and flush its session",
		ArgsUsage: "DIR",
		Description: `Fails (conflict) while files under DIR are open or a process sits in it.

   homefs unmount /home/agent/.codex`,
		Action: func(c *cli.Context) error {
			if err := args(c, 1, 1); err != nil {
				return err
			}
			return runUnmount(c.Context, client(c), os.Stdout, c.Args().First())
		},
	}
}

func runUnmount(ctx context.Context, cl *api.Client, out io.Writer, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	m, err := cl.Unmount(ctx, abs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "unmounted %s (session %s)\n", m.Dir, m.Session)
	return nil
}
