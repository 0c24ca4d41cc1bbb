// Command homefs serves coding-agent sessions as copy-on-write mounts over
// a content-addressed store, and drives the daemon that does so.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/internal/version"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == runInitCommand {
		os.Exit(runInit())
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	app := newApp()
	err := app.RunContext(ctx, permute(app, os.Args))
	stop()
	var status exitStatus
	if errors.As(err, &status) {
		// homefs run: the command's own status, which it has explained.
		os.Exit(int(status))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "homefs:", err)
	}
	code := exitCode(err)
	if code == exitNoSpace {
		fmt.Fprintln(os.Stderr, "homefs: the store's disk is full (it keeps a reserve so that it cannot crash);\n"+
			"  free space on it, or drop data (homefs forget, homefs session rm) and run homefs gc")
	}
	if code == exitDamaged {
		fmt.Fprintln(os.Stderr, "homefs: the store's files are damaged and were left as they are; copy the root aside first,\n"+
			"  then either restore it from a backup or a remote, or start with homefs serve --salvage, which\n"+
			"  keeps a copy of each damaged log, cuts it at the damage, and lets homefs fsck report what was lost")
	}
	os.Exit(code)
}

// Flags every command shares.
var (
	rootFlag = &cli.StringFlag{
		Name:    "root",
		Usage:   "daemon state directory (store, socket, mounts.json)",
		EnvVars: []string{"HOMEFS_ROOT"},
		Value:   api.DefaultRoot,
	}
	socketFlag = &cli.StringFlag{
		Name:    "socket",
		Usage:   "daemon socket (default: <root>/" + api.SocketName + ")",
		EnvVars: []string{"HOMEFS_SOCKET"},
	}
	jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print JSON instead of a table"}
)

func newApp() *cli.App {
	app := &cli.App{
		Name:    "homefs",
		Usage:   "copy-on-write homes for coding-agent sessions",
		Version: version.String(),
		Description: `homefs keeps agent homes (CODEX_HOME, CLAUDE_CONFIG_DIR, …) as sessions in a
content-addressed store and mounts them with FUSE. One daemon (homefsd, which
"homefs serve" runs) owns the store; every other command talks to it over its
Unix socket.

EXIT CODES:
   0  success
   1  other error
   2  usage error (bad arguments, names, paths, archives, providers,
      native snapshots, remote URLs; no remote credentials)
   3  not found (no such session, snapshot, mount, remote or rollout)
   4  conflict (exists already, busy, in use; a diverging bind target;
      a push whose remote head another host moved; a session's lease
      held by another host)
   5  corruption (damaged or missing stored data; fsck found problems)
   6  the daemon is not running
   7  the store's disk is full (free space, or forget data and gc)
   8  the store's files are damaged (serve changed nothing; see serve --salvage)`,
		Flags:                []cli.Flag{rootFlag, socketFlag},
		EnableBashCompletion: true,
		ExitErrHandler:       func(*cli.Context, error) {}, // main prints and exits
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		Commands: []*cli.Command{
			serveCommand(),
			statusCommand(),
			sessionCommand(),
			mountCommand(),
			unmountCommand(),
			captureCommand(),
			logCommand(),
			forkCommand(),
			restoreCommand(),
			diffCommand(),
			exportCommand(),
			importCommand(),
			forgetCommand(),
			gcCommand(),
			fsckCommand(),
			statsCommand(),
			bindCommand(),
			importNativeCommand(),
			exportNativeCommand(),
			remoteCommand(),
			pushCommand(),
			pullCommand(),
			leaseCommand(),
			runCommand(),
		},
	}
	var setUsage func([]*cli.Command)
	setUsage = func(cmds []*cli.Command) {
		for _, c := range cmds {
			c.OnUsageError = app.OnUsageError
			setUsage(c.Subcommands)
		}
	}
	setUsage(app.Commands)
	return app
}

// socketPath is the socket from --socket, or inside --root.
func socketPath(c *cli.Context) string {
	if s := c.String("socket"); s != "" {
		return s
	}
	return api.DefaultSocket(c.String("root"))
}

func client(c *cli.Context) *api.Client { return api.NewClient(socketPath(c)) }

// args checks the number of positional arguments.
func args(c *cli.Context, min, max int) error {
	n := c.NArg()
	if n < min || n > max {
		return usageError{fmt.Errorf("%s: want %s, got %d argument(s) (see homefs %s --help)",
			c.Command.Name, c.Command.ArgsUsage, n, c.Command.FullName())}
	}
	for i, a := range c.Args().Slice() {
		if a == "" {
			return usageError{fmt.Errorf("%s: argument %d is empty (want %s)", c.Command.Name, i+1, c.Command.ArgsUsage)}
		}
	}
	return nil
}
