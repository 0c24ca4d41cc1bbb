package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

func statsCommand() *cli.Command {
	return &cli.Command{
		Name:  "stats",
		Usage: "show sessions, snapshots, logical vs stored bytes, dedup and compression",
		Description: `Logical bytes are the file sizes of every session and snapshot added up as
if nothing were shared; plain bytes are the distinct chunks stored; stored
bytes are what they take after compression.

   homefs stats --json`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 0, 0); err != nil {
				return err
			}
			return runStats(c.Context, client(c), os.Stdout, c.Bool("json"))
		},
	}
}

func runStats(ctx context.Context, cl *api.Client, out io.Writer, asJSON bool) error {
	s, err := cl.Stats(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, s)
	}
	return table(out, nil, [][]string{
		{"sessions", fmt.Sprint(s.Sessions)},
		{"snapshots", fmt.Sprint(s.Snapshots)},
		{"chunks", fmt.Sprint(s.Chunks)},
		{"logical bytes", humanBytes(s.Logical)},
		{"plain bytes", humanBytes(s.PlainBytes)},
		{"stored bytes", humanBytes(s.StoredBytes)},
		{"dedup ratio", fmt.Sprintf("%.2fx", s.Dedup)},
		{"compression ratio", fmt.Sprintf("%.2fx", s.Compression)},
	})
}
