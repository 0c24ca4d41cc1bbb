package main

import (
	"context"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

func logCommand() *cli.Command {
	return &cli.Command{
		Name:      "log",
		Usage:     "list a session's snapshots, newest first, with lineage across forks",
		ArgsUsage: "SESSION|SNAPSHOT",
		Description: `Follows each snapshot's parent; where the session was forked it continues
with the origin session's history (marked "fork point"). Where a parent was
forgotten (homefs forget) a line says so and the log goes on with the
session's older snapshots still kept; a forgotten origin ends it.
A SNAPSHOT (an id, a unique prefix, SESSION@ID) starts the log at that
snapshot. A SESSION with no head here whose snapshots are here (pulled
from a remote: homefs pull creates no local session) starts it at the
newest of them.

   homefs log agent-1-retry
   homefs pull agent-1 origin && homefs log agent-1
   homefs log 3f2a9c1e`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 1, 1); err != nil {
				return err
			}
			return runLog(c.Context, client(c), os.Stdout, c.Args().First(), c.Bool("json"))
		},
	}
}

func runLog(ctx context.Context, cl *api.Client, out io.Writer, session string, asJSON bool) error {
	entries, err := cl.Log(ctx, session)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, entries)
	}
	rows := make([][]string, 0, len(entries))
	for _, e := range entries {
		if e.Forgotten {
			what := "… earlier snapshots forgotten"
			if e.ForkPoint {
				what = "(origin " + e.Session + "@" + shortID(e.ID) + " forgotten)"
			}
			rows = append(rows, []string{shortID(e.ID), e.Session, "-", "-", what})
			continue
		}
		note := e.Message
		if e.ForkPoint {
			note = "(fork point) " + note
		}
		var hs []string
		for p, h := range e.Handles {
			s := p + "=" + h.ID
			if h.Through != "" {
				s += "@" + h.Through
			}
			hs = append(hs, s)
		}
		sort.Strings(hs)
		handles := "-"
		if len(hs) > 0 {
			handles = strings.Join(hs, ",")
		}
		rows = append(rows, []string{shortID(e.ID), e.Session, ago(e.Created), handles, note})
	}
	return table(out, []string{"SNAPSHOT", "SESSION", "CREATED", "HANDLES", "MESSAGE"}, rows)
}
