package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/fork"
	"github.com/homefs/homefs/internal/api"
)

type bindOptions struct {
	provider string
	id       string
	source   string
	target   string
	json     bool
}

func bindCommand() *cli.Command {
	return &cli.Command{
		Name:      "bind",
		Usage:     "bind a provider session (e.g. a forked Codex rollout) from one session into another, by reference",
		ArgsUsage: "SOURCE TARGET",
		Description: `Finds the one rollout of provider session --id in SOURCE (for Codex also the
rollouts it was forked from) and places it in TARGET by reference: no byte
is copied. What TARGET already holds for the id is kept when it is the same
or longer, replaced when it is a cut-short copy, and otherwise refused
("diverges", exit 4) with nothing changed. Derived state the provider
rebuilds (Codex state_5.sqlite) is dropped from TARGET, and TARGET's handle
for the provider is set. Stop the harness in TARGET first. Safe to rerun.

Providers: ` + strings.Join(fork.Providers(), ", ") + `.

   homefs bind --provider codex --id 0199a3b2-… agent-1 agent-2`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "provider", Usage: "the agent harness (" + strings.Join(fork.Providers(), ", ") + ")"},
			&cli.StringFlag{Name: "id", Usage: "the provider session id"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 2, 2); err != nil {
				return err
			}
			return runBind(c.Context, client(c), os.Stdout, bindOptions{
				provider: c.String("provider"), id: c.String("id"),
				source: c.Args().Get(0), target: c.Args().Get(1), json: c.Bool("json"),
			})
		},
	}
}

func runBind(ctx context.Context, cl *api.Client, out io.Writer, o bindOptions) error {
	if o.provider == "" {
		return usageError{fmt.Errorf("bind: --provider is required (known: %s)", strings.Join(fork.Providers(), ", "))}
	}
	if o.id == "" {
		return usageError{fmt.Errorf("bind: --id is required: the provider session id to bind")}
	}
	res, err := cl.Bind(ctx, api.BindRequest{Provider: o.provider, ID: o.id, Source: o.source, Target: o.target})
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, res)
	}
	fmt.Fprintf(out, "bound %s session %s from %s into %s (handle %s", res.Provider, res.Handle.ID, res.Source, res.Target, res.Handle.ID)
	if res.Handle.Through != "" {
		fmt.Fprintf(out, " through %s", res.Handle.Through)
	}
	fmt.Fprintln(out, ")")
	rows := make([][]string, 0, len(res.Rollouts))
	for i, r := range res.Rollouts {
		role := "ancestor"
		if i == len(res.Rollouts)-1 {
			role = "bound"
		}
		path := r.Path
		if r.SourcePath != r.Path {
			path = r.SourcePath + " -> " + r.Path
		}
		rows = append(rows, []string{role, string(r.Action), r.ID, humanBytes(r.Size), path})
	}
	if err := table(out, []string{"ROLE", "ACTION", "ID", "SIZE", "PATH"}, rows); err != nil {
		return err
	}
	for _, p := range res.Removed {
		fmt.Fprintf(out, "removed derived state %s\n", p)
	}
	return nil
}
