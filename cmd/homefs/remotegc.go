package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

// remoteSessionsCommand is "homefs remote sessions".
func remoteSessionsCommand() *cli.Command {
	return &cli.Command{
		Name:      "sessions",
		Usage:     "list the sessions on a remote: heads, snapshot records and sizes",
		ArgsUsage: "[REMOTE]",
		Description: `Reads every head and snapshot record on the remote and the tree nodes they
reach. SIZE is the stored size of what the session's records reach (shared
objects count for every session), HEAD SIZE what its head alone reaches. A
session without a head shows "-": its records are left from a purge cut
short or from pushes that never moved it; gc --remote deletes them.

   homefs remote sessions origin --json`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 0, 1); err != nil {
				return err
			}
			return runRemoteSessions(c.Context, client(c), os.Stdout, c.Args().First(), c.Bool("json"))
		},
	}
}

func runRemoteSessions(ctx context.Context, cl *api.Client, out io.Writer, name string, asJSON bool) error {
	res, err := cl.RemoteSessions(ctx, name)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, res)
	}
	if len(res.Sessions) == 0 {
		fmt.Fprintf(out, "no sessions on remote %s\n", res.Remote)
		return nil
	}
	rows := make([][]string, 0, len(res.Sessions))
	for _, s := range res.Sessions {
		head, updated := "-", "-"
		if s.Head != "" {
			head, updated = shortID(s.Head), ago(s.HeadUpdated)
		}
		rows = append(rows, []string{s.Session, head, updated, strconv.Itoa(s.Snapshots), humanBytes(s.Bytes), humanBytes(s.HeadBytes)})
	}
	return table(out, []string{"SESSION", "HEAD", "UPDATED", "SNAPSHOTS", "SIZE", "HEAD SIZE"}, rows)
}

// runRemoteForget is forget --remote.
func runRemoteForget(ctx context.Context, cl *api.Client, out io.Writer, name string, o forgetOptions) error {
	res, err := cl.RemoteForget(ctx, api.RemoteForgetRequest{
		ForgetRequest: api.ForgetRequest{Snapshots: o.snapshots, Session: o.session, Policy: o.policy, DryRun: o.dryRun},
		Remote:        name,
	})
	if err != nil {
		return err
	}
	return printForget(out, res, o, "homefs gc --remote")
}

// runRemotePurge is session rm --purge --remote.
func runRemotePurge(ctx context.Context, cl *api.Client, out io.Writer, name, session string, asJSON bool) error {
	res, err := cl.RemotePurge(ctx, api.RemotePurgeRequest{Remote: name, Session: session})
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, res)
	}
	fmt.Fprintf(out, "removed session %s from the remote and forgot its %d snapshots there; run homefs gc --remote to delete their objects\n", session, len(res.Forgotten))
	return nil
}

// runRemoteGC is gc --remote.
func runRemoteGC(ctx context.Context, cl *api.Client, out io.Writer, name string, asJSON bool) error {
	res, err := cl.RemoteGC(ctx, name)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, res)
	}
	fmt.Fprintf(out, "remote %s: marked from %d heads (waited for %d pushes); kept %d records, %d objects (%s); deleted %d records, %d objects (%s) in %s\n",
		res.Remote, res.Heads, res.WaitedPushes, res.Records, res.Chunks, humanBytes(res.Kept),
		res.DeletedRecords, res.DeletedChunks, humanBytes(res.DeletedBytes), res.Duration.Round(1e6))
	return nil
}
