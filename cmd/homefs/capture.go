package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/manifest"
)

type captureOptions struct {
	session string
	message string
	handles []string // PROVIDER=ID[@THROUGH]
	push    bool
	remote  string // with push; "" for the only remote
	json    bool
}

// captureResult is capture --json's output: the snapshot, and with --push
// what the push did.
type captureResult struct {
	*api.SnapshotInfo
	Pushed *api.PushResult `json:"pushed,omitempty"`
}

func captureCommand() *cli.Command {
	return &cli.Command{
		Name:      "capture",
		Usage:     "snapshot a session, atomically across its mounts; prints the snapshot id",
		ArgsUsage: "SESSION [--push [REMOTE]]",
		Description: `Freezes the session's current state (every write made before the command
started) as an immutable snapshot and prints its id. --handle records the
provider session the snapshot belongs to and the turn it is valid through.
--push then pushes the snapshot to REMOTE (or the only remote) and returns
once it is durable there (see "homefs push"); progress goes to stderr. If
the push fails, the snapshot stays captured: the message says how to push
it again or, on a conflict (exit 4), how to keep it as a new session or
take the other host's turn.

   homefs capture agent-1 -m "after turn 3" --handle codex=0199a3b2-…@turn-3
   homefs capture agent-1 --push origin`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "describe the snapshot"},
			&cli.StringSliceFlag{Name: "handle", Usage: "PROVIDER=ID[@THROUGH], repeatable"},
			&cli.BoolFlag{Name: "push", Usage: "push the snapshot to REMOTE (the argument after SESSION) and wait until it is durable"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			max := 1
			if c.Bool("push") {
				max = 2
			}
			if err := args(c, 1, max); err != nil {
				return err
			}
			return runCapture(c.Context, client(c), os.Stdout, captureOptions{
				session: c.Args().First(), message: c.String("message"),
				handles: c.StringSlice("handle"), push: c.Bool("push"), remote: c.Args().Get(1),
				json: c.Bool("json"),
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

func runCapture(ctx context.Context, cl *api.Client, out io.Writer, o captureOptions) error {
	handles, err := parseHandles(o.handles)
	if err != nil {
		return err
	}
	snap, err := cl.Capture(ctx, o.session, api.CaptureRequest{Message: o.message, Handles: handles})
	if err != nil {
		return err
	}
	res := captureResult{SnapshotInfo: snap}
	if o.push {
		// The id, not the session: a capture meanwhile must not change
		// what is pushed.
		p := newProgress("push", "objects", o.json)
		res.Pushed, err = cl.Push(ctx, api.PushRequest{Spec: snap.ID, Remote: o.remote}, p.show)
		p.done()
		if err != nil {
			return pushFailed(snap, o.remote, err)
		}
	}
	if o.json {
		return printJSON(out, res)
	}
	fmt.Fprintln(out, snap.ID)
	if res.Pushed != nil {
		printPush(os.Stderr, res.Pushed)
	}
	return nil
}

// pushFailed is the error of capture --push when the capture succeeded
// and the push of snap to remoteName did not. An interrupted push
// completes when rerun; a conflict does not (the remote head moved along
// another line), so that one says the two ways out instead.
func pushFailed(snap *api.SnapshotInfo, remoteName string, err error) error {
	on := ""
	if remoteName != "" {
		on = " " + remoteName
	}
	if exitCode(err) != exitConflict {
		return fmt.Errorf("captured %s, but the push failed (rerun: homefs push %s%s): %w", snap.ID, snap.ID, on, err)
	}
	short := shortID(snap.ID)
	return fmt.Errorf("captured %s, but the remote head of %s moved along another line (another host pushed a turn this snapshot does not descend from), "+
		"so pushing it again conflicts again; keep this turn as a new session: homefs fork %s@%s NEW && homefs capture --push NEW%s; "+
		"or take the other host's turn: homefs pull %s%s, then fork or restore the snapshot it prints: %w",
		snap.ID, snap.Session, snap.Session, short, on, snap.Session, on, err)
}
