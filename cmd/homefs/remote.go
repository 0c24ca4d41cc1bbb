package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/remote/remotetypes"
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
profile, where an encryption key comes from: never keys). Credentials are the
daemon's: with --profile, that profile of its shared credentials file
(AWS_SHARED_CREDENTIALS_FILE, ~/.aws/credentials), whatever its environment
holds; else AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN) in
its environment, else the AWS_PROFILE or "default" profile of that file. The
server is not contacted, unless --encrypt.

--encrypt seals every object on the remote (AES-256-GCM) and hides the names of
chunks, snapshots and sessions, with a 32-byte key (raw, 64 hex digits or
base64) that the daemon reads from a file, its own environment or a command's
output, at this add and at each start. The first add makes the remote's key
check on an empty prefix; later adds with another key fail ("wrong encryption
key", exit 2). Lose the key and the remote cannot be read.

   homefs remote add origin s3://agents/homefs --endpoint https://s3.example.com --region eu-west-1
   openssl rand -hex 32 > /etc/homefs/origin.key
   homefs remote add origin s3://agents/homefs --endpoint https://s3.example.com --encrypt --key-file /etc/homefs/origin.key`,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "endpoint", Usage: "S3 endpoint URL (default: AWS for the region)"},
					&cli.StringFlag{Name: "region", Usage: "signing region (default: AWS_REGION of the daemon, else us-east-1)"},
					&cli.StringFlag{Name: "profile", Usage: "section of the daemon's shared credentials file"},
					&cli.BoolFlag{Name: "encrypt", Usage: "encrypt every object, with a key from --key-file, --key-env or --key-command"},
					&cli.StringFlag{Name: "key-file", Usage: "with --encrypt: a file holding the key, read by the daemon"},
					&cli.StringFlag{Name: "key-env", Usage: "with --encrypt: a variable of the daemon's environment holding the key"},
					&cli.StringFlag{Name: "key-command", Usage: "with --encrypt: a command (sh -c) the daemon runs that prints the key"},
					jsonFlag,
				},
				Action: func(c *cli.Context) error {
					if err := args(c, 2, 2); err != nil {
						return err
					}
					enc, err := encryptionFlags(c)
					if err != nil {
						return err
					}
					return runRemoteAdd(c.Context, client(c), os.Stdout, remotetypes.Config{
						Name: c.Args().Get(0), URL: c.Args().Get(1), Endpoint: c.String("endpoint"),
						Region: c.String("region"), Profile: c.String("profile"), Encryption: enc,
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

// encryptionFlags reads --encrypt and its key source; a key file is made
// absolute, since the daemon, not this command, reads it.
func encryptionFlags(c *cli.Context) (remotetypes.Encryption, error) {
	enc := remotetypes.Encryption{KeyFile: c.String("key-file"), KeyEnv: c.String("key-env"), KeyCommand: c.String("key-command")}
	if !c.Bool("encrypt") {
		if enc.Enabled() {
			return enc, usageError{errors.New("--key-file, --key-env and --key-command go with --encrypt")}
		}
		return enc, nil
	}
	if !enc.Enabled() {
		return enc, usageError{errors.New("--encrypt needs the key's source: --key-file F, --key-env VAR or --key-command CMD")}
	}
	if enc.KeyFile != "" {
		abs, err := filepath.Abs(enc.KeyFile)
		if err != nil {
			return enc, usageError{err}
		}
		enc.KeyFile = abs
	}
	return enc, nil
}

func runRemoteAdd(ctx context.Context, cl *api.Client, out io.Writer, cfg remotetypes.Config, asJSON bool) error {
	got, err := cl.AddRemote(ctx, cfg)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSON(out, got)
	}
	if got.Encryption.Enabled() {
		fmt.Fprintf(out, "added remote %s: %s, encrypted (%s)\n", got.Name, got.URL, got.Encryption)
		return nil
	}
	fmt.Fprintf(out, "added remote %s: %s\n", got.Name, got.URL)
	return nil
}

func runRemoteList(ctx context.Context, cl *api.Client, out io.Writer, asJSON bool) error {
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
		enc := "-"
		if r.Encryption.Enabled() {
			enc = r.Encryption.String()
		}
		rows = append(rows, []string{r.Name, r.URL, dash(r.Endpoint), dash(r.Region), dash(r.Profile), enc})
	}
	return table(out, []string{"NAME", "URL", "ENDPOINT", "REGION", "PROFILE", "ENCRYPTION"}, rows)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
