package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/catalog"
)

func forgetCommand() *cli.Command {
	return &cli.Command{
		Name:      "forget",
		Usage:     "forget snapshots, named or by a keep policy (restic's rules); gc then frees them",
		ArgsUsage: "[SNAPSHOT…]",
		Description: `Removes snapshots from the index; the next gc drops their records and
whatever of their trees nothing kept reaches, and erases those bytes from
the store's files. Sessions, and snapshots whose parent or origin was
forgotten, keep working: log shows the gap.

Name snapshots (ids, prefixes, SESSION@ID), or give --session with a
policy; a snapshot is kept when any rule keeps it:

  --keep-last N       the N newest
  --keep-within D     every one within D (e.g. 36h) of the newest
  --keep-hourly N     the newest of each of the last N hours with snapshots
  --keep-daily N      … days, --keep-weekly N ISO weeks, --keep-monthly N
                      months, --keep-yearly N years (local time); a rule
                      with counts left keeps the oldest snapshot too; -1
                      means every bucket

Never forgotten: a session's head snapshot, and a snapshot a mount shows
(asked by name, forget refuses with exit 4). --dry-run lists what would go
and why each kept snapshot stays.

With --remote REMOTE the same rules apply to the session's snapshot
records on the remote; the session's remote head is never forgotten, and
gc --remote then deletes what nothing kept reaches.

   homefs forget agent-1@3f2a9c1e
   homefs forget --session agent-1 --keep-last 10 --keep-daily 7 --dry-run`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "session", Usage: "apply the keep policy to the snapshots of `SESSION`"},
			&cli.IntFlag{Name: "keep-last", Usage: "keep the `N` newest snapshots"},
			&cli.DurationFlag{Name: "keep-within", Usage: "keep snapshots within `DURATION` of the newest"},
			&cli.IntFlag{Name: "keep-hourly", Usage: "keep the newest snapshot of each of the last `N` hours"},
			&cli.IntFlag{Name: "keep-daily", Usage: "keep the newest snapshot of each of the last `N` days"},
			&cli.IntFlag{Name: "keep-weekly", Usage: "keep the newest snapshot of each of the last `N` weeks"},
			&cli.IntFlag{Name: "keep-monthly", Usage: "keep the newest snapshot of each of the last `N` months"},
			&cli.IntFlag{Name: "keep-yearly", Usage: "keep the newest snapshot of each of the last `N` years"},
			&cli.BoolFlag{Name: "dry-run", Aliases: []string{"n"}, Usage: "only list what would be forgotten"},
			&cli.StringFlag{Name: "remote", Usage: "forget snapshot records on `REMOTE` instead (its heads are never forgotten)"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			opts := forgetOptions{
				snapshots: c.Args().Slice(),
				session:   c.String("session"),
				policy: catalog.Policy{
					Last: c.Int("keep-last"), Within: c.Duration("keep-within"),
					Hourly: c.Int("keep-hourly"), Daily: c.Int("keep-daily"), Weekly: c.Int("keep-weekly"),
					Monthly: c.Int("keep-monthly"), Yearly: c.Int("keep-yearly"),
				},
				dryRun: c.Bool("dry-run"),
				json:   c.Bool("json"),
			}
			if err := opts.check(); err != nil {
				return usageError{err}
			}
			if c.IsSet("remote") {
				return runRemoteForget(c.Context, client(c), os.Stdout, c.String("remote"), opts)
			}
			return runForget(c.Context, client(c), os.Stdout, opts)
		},
	}
}

type forgetOptions struct {
	snapshots    []string
	session      string
	policy       catalog.Policy
	dryRun, json bool
}

func (o forgetOptions) check() error {
	switch {
	case len(o.snapshots) > 0 && o.session != "":
		return fmt.Errorf("forget: name snapshots or give --session with a policy, not both")
	case len(o.snapshots) > 0 && !o.policy.Empty():
		return fmt.Errorf("forget: --keep-… rules need --session, not snapshot names")
	case len(o.snapshots) == 0 && o.session == "":
		return fmt.Errorf("forget: name the snapshots to forget, or give --session SESSION with --keep-… rules")
	case o.session != "" && o.policy.Empty():
		return fmt.Errorf("forget: --session %s needs at least one --keep-… rule (without one every snapshot would go)", o.session)
	}
	return o.policy.Validate()
}

func runForget(ctx context.Context, cl *api.Client, out io.Writer, o forgetOptions) error {
	res, err := cl.Forget(ctx, api.ForgetRequest{Snapshots: o.snapshots, Session: o.session, Policy: o.policy, DryRun: o.dryRun})
	if err != nil {
		return err
	}
	return printForget(out, res, o, "homefs gc")
}

// printForget reports a forget; gc is the command that frees the space.
func printForget(out io.Writer, res *api.ForgetResult, o forgetOptions, gc string) error {
	if o.json {
		return printJSON(out, res)
	}
	verb := "forgot"
	if o.dryRun {
		verb = "would forget"
	}
	if len(res.Decisions) > 0 {
		rows := make([][]string, 0, len(res.Decisions))
		for _, d := range res.Decisions {
			action, why := "forget", "-"
			if d.Keep {
				action, why = "keep", strings.Join(d.Reasons, ", ")
			}
			rows = append(rows, []string{shortID(d.ID), d.Time.Local().Format(time.DateTime), action, why})
		}
		if err := table(out, []string{"SNAPSHOT", "CREATED", "ACTION", "KEPT BY"}, rows); err != nil {
			return err
		}
	} else {
		for _, id := range res.Forgotten {
			fmt.Fprintf(out, "%s %s\n", verb, shortID(id))
		}
	}
	fmt.Fprintf(out, "%s %d snapshots", verb, len(res.Forgotten))
	if !o.dryRun && len(res.Forgotten) > 0 {
		fmt.Fprintf(out, "; run %s to free their space", gc)
	}
	fmt.Fprintln(out)
	return nil
}
