package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

func fsckCommand() *cli.Command {
	return &cli.Command{
		Name:  "fsck",
		Usage: "verify every node and chunk that a session or snapshot reaches",
		Description: `Reads and re-hashes every reachable object; reports each problem with its
session or snapshot and path, and exits 5 if there is any.

With --remote REMOTE, fsck checks the remote instead: it reads back every
record, tree and index node and chunk that a session head there reaches
(through Parent and Origin records, as far as forget left them; with
--session, only that session's head), each checked as a pull checks it,
and reports every missing or damaged object with its key and the
snapshots and sessions that reach it. "push --repair" uploads them again
from a host that has them.

   homefs fsck
   homefs fsck --remote origin --session agent-1`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "remote", Usage: "check what the heads on `REMOTE` reach, instead of the local store"},
			&cli.StringFlag{Name: "session", Usage: "with --remote: check only what the head of `SESSION` reaches"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 0, 0); err != nil {
				return err
			}
			if c.IsSet("remote") {
				req := api.RemoteFsckRequest{Remote: c.String("remote"), Session: c.String("session")}
				return runRemoteFsck(c.Context, client(c), os.Stdout, req, c.Bool("json"))
			}
			if c.IsSet("session") {
				return usageError{fmt.Errorf("fsck: --session needs --remote (a local fsck checks every session)")}
			}
			return runFsck(c.Context, client(c), os.Stdout, c.Bool("json"))
		},
	}
}

func runFsck(ctx context.Context, cl *api.Client, out io.Writer, asJSON bool) error {
	p := newProgress("fsck", "objects", asJSON)
	rep, err := cl.Fsck(ctx, p.show)
	p.done()
	if err != nil {
		return err
	}
	return printProblems(out, asJSON, rep, rep.Problems, fmt.Sprintf("checked %d sessions, %d snapshots, %d objects (%s): %d problems",
		rep.Sessions, rep.Snapshots, rep.Objects, humanBytes(rep.Bytes), len(rep.Problems)))
}

// runRemoteFsck is fsck --remote.
func runRemoteFsck(ctx context.Context, cl *api.Client, out io.Writer, req api.RemoteFsckRequest, asJSON bool) error {
	p := newProgress("fsck", "objects", asJSON)
	rep, err := cl.RemoteFsck(ctx, req, p.show)
	p.done()
	if err != nil {
		return err
	}
	summary := fmt.Sprintf("remote %s: checked %d heads, %d snapshots, %d objects (%s): %d problems",
		rep.Remote, rep.Heads, rep.Snapshots, rep.Objects, humanBytes(rep.Bytes), len(rep.Problems))
	if len(rep.Problems) > 0 {
		summary += "\nrun homefs push --repair SESSION on a host that holds the session, then fsck --remote again"
	}
	return printProblems(out, asJSON, rep, rep.Problems, summary)
}

// printProblems prints rep as JSON, or each problem and then summary; it
// returns errProblems (exit 5) if there is any problem.
func printProblems[P fmt.Stringer](out io.Writer, asJSON bool, rep any, problems []P, summary string) error {
	if asJSON {
		if err := printJSON(out, rep); err != nil {
			return err
		}
	} else {
		for _, pr := range problems {
			fmt.Fprintln(out, pr.String())
		}
		fmt.Fprintln(out, summary)
	}
	if len(problems) > 0 {
		return errProblems
	}
	return nil
}
