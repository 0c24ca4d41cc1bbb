package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/archive"
)

type importOptions struct {
	source  string // a directory, a tar file, or "-" for stdin
	session string
	devices bool
	json    bool
}

func importCommand() *cli.Command {
	return &cli.Command{
		Name:      "import",
		Usage:     "create a session from a directory or a tar archive",
		ArgsUsage: "DIR|TAR|- SESSION",
		Description: `Stores every file (chunked, deduplicated) and creates SESSION at the end, in
one step: on any error nothing is created. Refused: entries with ".." or
absolute names, entries below a symlink, hard links to anything but an
earlier non-directory, malformed archives, files over 64 GiB (the most a
homefs file holds) and sparse files (made by tar --sparse: archive them
without it; their holes are stored as holes all the same). Fifos are kept; device nodes
only with --devices (an archive from elsewhere should not make them: a
--dev mount would open their devices). Sockets are skipped when DIR is read,
as GNU tar skips them, and tar has no type for them.
Symlinks are kept as they are, wherever they point, and never followed;
only DIR itself may be a symlink to the directory to import.

   homefs import ~/.codex agent-1
   homefs import home.tar agent-2
   tar -C src -c . | homefs import - agent-3`,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "devices", Usage: "keep character and block device nodes of the archive"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if err := args(c, 2, 2); err != nil {
				return err
			}
			return runImport(c.Context, client(c), os.Stdout, importOptions{source: c.Args().Get(0), session: c.Args().Get(1), devices: c.Bool("devices"), json: c.Bool("json")})
		},
	}
}

func runImport(ctx context.Context, cl *api.Client, out io.Writer, o importOptions) error {
	p := newProgress("import", "entries", o.json)
	defer p.done()
	var src io.Reader
	var size int64 // of a tar file: the bar's total
	var localErr chan error
	switch st, err := os.Stat(o.source); {
	case o.source == "-":
		src = os.Stdin
	case err != nil:
		return err
	case st.IsDir():
		pr, pw := io.Pipe()
		localErr = make(chan error, 1)
		go func() {
			err := archive.TarDir(ctx, o.source, pw, nil)
			pw.CloseWithError(err)
			localErr <- err
		}()
		defer pr.Close()
		src = pr
	default:
		f, err := os.Open(o.source)
		if err != nil {
			return err
		}
		defer f.Close()
		src = f
		if st.Mode().IsRegular() {
			size = st.Size()
		}
	}
	body := &countingReader{r: src, total: size, p: p}
	res, err := cl.Import(ctx, o.session, body, o.devices)
	if localErr != nil {
		if lerr := <-localErr; lerr != nil && err != nil {
			// Reading the directory failed first; that is the cause.
			return fmt.Errorf("import %s: %w", o.source, lerr)
		}
	}
	if err != nil {
		return err
	}
	if o.json {
		return printJSON(out, res)
	}
	fmt.Fprintf(out, "imported %s: %d files, %d directories, %d symlinks, %d special files, %s\n",
		res.Session, res.Files, res.Dirs, res.Symlinks, res.Special, humanBytes(res.Bytes))
	return nil
}
