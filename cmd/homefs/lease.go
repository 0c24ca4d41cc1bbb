package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote/remotetypes"
)

type leaseOptions struct {
	session string
	remote  string // "" for the only one
	ttl     time.Duration
	steal   bool
	json    bool
}

func leaseCommand() *cli.Command {
	action := func(run func(context.Context, *api.Client, io.Writer, leaseOptions) error) cli.ActionFunc {
		return func(c *cli.Context) error {
			if err := args(c, 1, 2); err != nil {
				return err
			}
			return run(c.Context, client(c), os.Stdout, leaseOptions{
				session: c.Args().Get(0), remote: c.Args().Get(1),
				ttl: c.Duration("ttl"), steal: c.Bool("steal"), json: c.Bool("json"),
			})
		}
	}
	return &cli.Command{
		Name:  "lease",
		Usage: "hold a session on a remote, so that no other host works on it meanwhile",
		Description: `A lease names the host that works on a session until it expires. The
daemon that acquires it renews it every third of its ttl for as long as it
runs; another host's acquire is refused (exit 4, naming the holder) until it
is released or expires. Expiry is judged by the clock of the host that
acquires: see docs/ARCHITECTURE-remote.md. REMOTE may be left out when only
one is configured.`,
		Subcommands: []*cli.Command{
			{
				Name:      "acquire",
				Usage:     "take a session's lease on a remote for this daemon",
				ArgsUsage: "SESSION [REMOTE]",
				Description: `Refused with exit 4 while another host holds a live lease; --steal takes it
anyway (for a host that died: the robbed holder's daemon drops the lease at
its next renewal). Acquiring a lease this daemon holds renews it.

   homefs lease acquire agent-1 origin --ttl 10m`,
				Flags: []cli.Flag{
					&cli.DurationFlag{Name: "ttl", Value: remotetypes.DefaultLeaseTTL, Usage: "how long the lease lasts unless renewed"},
					&cli.BoolFlag{Name: "steal", Usage: "take the lease even from a live holder"},
					jsonFlag,
				},
				Action: action(runLeaseAcquire),
			},
			{
				Name:        "release",
				Usage:       "give back this daemon's lease of a session",
				ArgsUsage:   "SESSION [REMOTE]",
				Description: "Refused with exit 4 if another host holds it.\n\n   homefs lease release agent-1 origin",
				Flags:       []cli.Flag{jsonFlag},
				Action:      action(runLeaseRelease),
			},
			{
				Name:        "show",
				Usage:       "show who holds a session's lease and until when",
				ArgsUsage:   "SESSION [REMOTE]",
				Description: "Exit 3 if the session never had a lease.\n\n   homefs lease show agent-1 origin --json",
				Flags:       []cli.Flag{jsonFlag},
				Action:      action(runLeaseShow),
			},
		},
	}
}

func runLeaseAcquire(ctx context.Context, cl *api.Client, out io.Writer, o leaseOptions) error {
	if o.ttl < remotetypes.MinLeaseTTL {
		return usageError{fmt.Errorf("lease acquire: --ttl %s is under %s", o.ttl, remotetypes.MinLeaseTTL)}
	}
	l, err := cl.AcquireLease(ctx, api.LeaseRequest{Session: o.session, Remote: o.remote, TTLMs: o.ttl.Milliseconds(), Steal: o.steal})
	if err != nil {
		return err
	}
	return printLease(out, l, "acquired", o.json)
}

func runLeaseRelease(ctx context.Context, cl *api.Client, out io.Writer, o leaseOptions) error {
	l, err := cl.ReleaseLease(ctx, api.LeaseRequest{Session: o.session, Remote: o.remote})
	if err != nil {
		return err
	}
	return printLease(out, l, "released", o.json)
}

func runLeaseShow(ctx context.Context, cl *api.Client, out io.Writer, o leaseOptions) error {
	l, err := cl.Lease(ctx, o.session, o.remote)
	if err != nil {
		return err
	}
	return printLease(out, l, "", o.json)
}

func printLease(out io.Writer, l *api.LeaseInfo, did string, asJSON bool) error {
	if asJSON {
		return printJSON(out, l)
	}
	if did != "" {
		fmt.Fprintf(out, "%s lease of %s on %s\n", did, l.Session, l.Remote)
	}
	state := "expired"
	switch {
	case l.Released:
		state = "released"
	case l.Live:
		state = "live"
	}
	who := l.Holder.String()
	if l.Ours {
		who += ", this daemon"
	}
	fmt.Fprintf(out, "session %s on %s: %s, holder %s, acquired %s, renewed %s, expires %s (ttl %s)\n",
		l.Session, l.Remote, state, who, l.Acquired.Format(time.RFC3339), l.Renewed.Format(time.RFC3339),
		l.Expires.Format(time.RFC3339), time.Duration(l.TTLMs)*time.Millisecond)
	return nil
}
