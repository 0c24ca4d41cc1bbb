package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"homefs/internal/daemon"
	"homefs/internal/remote"
)

func remoteCommand() *cli.Command {
	return &cli.Command{
		Name:  "remote",
		Usage: "configure the S3-compatible remotes sessions are pushed to and pulled from",
		Subcommands: []*cli.Command{
			remoteSessionsCommand(),
			{
				Name:      "add",
				Usage:     "configure a remote",
				ArgsUsage: "NAME s3://BUCKET[/PREFIX]",
				Description: `Records the remote in the daemon's remotes.json (name, URL, endpoint, region,
profile: never keys). Credentials are the daemon's: AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN) in its environment, else its shared
credentials file (AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials; --profile,
AWS_PROFILE or "default"). The server is not contacted.

   homefs remote add origin s3://agents/homefs --endpoint https://s3.example.com --region eu-west-1`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "endpoint", Usage: "S3 endpoint URL (default: AWS for the region)"},
					&cli.StringFlag{Name: "region", Usage: "signing region (default: AWS_REGION of the daemon, else us-east-1)"},
					&cli.StringFlag{Name: "profile", Usage: "section of the daemon's shared credentials file"},
					jsonFlag,
				},
				Action: func(c *cli.Context) error {
					if err := args(c, 2, 2); err != nil {
						return err
					}
					return runRemoteAdd(c.Context, client(c), os.Stdout, remote.Config{
						Name: c.Args().Get(0), URL: c.Args().Get(1), Endpoint: c.String("endpoint"),
						Region: c.String("region"), Profile: c.String("profile"),
					}, c.Bool("json"))
				},
			},
			{
				Name:        "list",
				Aliases:     []string{"ls"},
				Usage:       "list the configured remotes",
				Description: "   homefs remote list --json",
				Flags:       []cli.Flag{jsonFlag},
				Action: func(c *cli.Context) error {
					if err := args(c, 0, 0); err != nil {
						return err
					}
					return runRemoteList(c.Context, client(c), os.Stdout, c.Bool("json"))
				},
			},
			{
				Name:      "rm",
				Usage:     "forget a remote (nothing on it is deleted)",
				ArgsUsage: "NAME",
				Description: `Snapshots mounted or pulled lazily from it cannot read chunks that are not
local any more, until it is added again.

   homefs remote rm origin`,
				Action: func(c *cli.Context) error {
					if err := args(c, 1, 1); err != nil {
						return err
					}
					return client(c).RemoveRemote(c.Context, c.Args().First())
				},
			},
		},
	}
}

func runRemoteAdd(ctx context.Context, cl *daemon.Client, out io.Writer, cfg remote.Config, asJSON bool) error {
	got, err := cl.AddRemote(ctx, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, got)
	}
	fmt.Fprintf(out, "added remote %s: %s\n", got.Name, got.URL)
	return nil
}

func runRemoteList(ctx context.Context, cl *daemon.Client, out io.Writer, asJSON bool) error {
	list, err := cl.Remotes(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(out, "no remotes (homefs remote add NAME s3://BUCKET/PREFIX --endpoint URL)")
		return nil
	}
	rows := make([][]string, 0, len(list))
	for _, r := range list {
		rows = append(rows, []string{r.Name, r.URL, dash(r.Endpoint), dash(r.Region), dash(r.Profile)})
	}
	return table(out, []string{"NAME", "URL", "ENDPOINT", "REGION", "PROFILE"}, rows)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
