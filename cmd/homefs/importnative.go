package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
)

type importNativeOptions struct {
	file    string // the snapshot JSON
	blobDir string // holds blobs/<sha256 hex>
	session string
	json    bool
}

func importNativeCommand() *cli.Command {
	return &cli.Command{
		Name:      "import-native",
		Usage:     "create a session from a snapshot in the TypeScript harness's native format",
		ArgsUsage: "FILE BLOBDIR SESSION",
		Description: `FILE is the snapshot JSON ({"version":2,"handles":…,"files":…}); its blobs are
BLOBDIR/blobs/<sha256 hex>. Every blob is checked (a regular file, its size,
its SHA-256) before anything is written; then SESSION is created in one step
with the snapshot's provider handles. On any error nothing is created. Paths
map as docs/PROVIDERS.md says (codex/sessions/ → codex-home/sessions/).
FILE and BLOBDIR must not lie inside a homefs mount.

   homefs import-native /srv/snap/snapshot.json /srv/snap agent-1`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if err := args(c, 3, 3); err != nil {
				return err
			}
			return runImportNative(c.Context, client(c), os.Stdout, importNativeOptions{
				file: c.Args().Get(0), blobDir: c.Args().Get(1), session: c.Args().Get(2), json: c.Bool("json"),
			})
		},
	}
}

func runImportNative(ctx context.Context, cl *api.Client, out io.Writer, o importNativeOptions) error {
	file, err := filepath.Abs(o.file)
	if err != nil {
		return err
	}
	blobDir, err := filepath.Abs(o.blobDir)
	if err != nil {
		return err
	}
	res, err := cl.ImportNative(ctx, api.ImportNativeRequest{File: file, BlobDir: blobDir, Session: o.session})
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, res)
	}
	fmt.Fprintf(out, "imported %s: %d files\n", res.Session, res.Files)
	for _, name := range slices.Sorted(maps.Keys(res.Handles)) {
		h := res.Handles[name]
		fmt.Fprintf(out, "handle %s=%s@%s\n", name, h.ID, h.Through)
	}
	return nil
}
