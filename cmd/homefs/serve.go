package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/urfave/cli/v2"
)

// daemonName is the daemon binary's name (cmd/homefsd).
const daemonName = "homefsd"

// serveCommand runs homefsd in place of this process. The daemon is a
// binary of its own so that the CLI links none of it (go-fuse, Prometheus,
// the store's engine): every other command starts in a few milliseconds.
func serveCommand() *cli.Command {
	return &cli.Command{
		Name:      "serve",
		Usage:     "run the homefs daemon, homefsd (owns the store, serves the socket and the mounts)",
		UsageText: "homefs serve [homefsd flags] (homefs serve --help lists them)",
		Description: `Runs homefsd, the daemon binary, in place of this process: the same pid, so a
service manager's signals and watchdog reach the daemon. homefsd is looked for
beside this homefs (symlinks resolved), then on $PATH. Every argument after
"serve" goes to it as it is; --root and --socket given before "serve" are
passed on, and HOMEFS_ROOT and HOMEFS_SOCKET reach it through the environment.
homefs serve --help (homefsd --help) describes the daemon and its flags.`,
		SkipFlagParsing: true,
		Action: func(c *cli.Context) error {
			bin, err := findDaemon()
			if err != nil {
				return err
			}
			argv := []string{bin, "--root", c.String("root")}
			if s := c.String("socket"); s != "" {
				argv = append(argv, "--socket", s)
			}
			argv = append(argv, c.Args().Slice()...)
			if err := syscall.Exec(bin, argv, os.Environ()); err != nil {
				// %v: an exec failure is no missing session (exit 1, not 3).
				hint := ""
				if errors.Is(err, syscall.ENOENT) {
					hint = " (the file is there: its ELF interpreter is not; build homefsd with CGO_ENABLED=0)"
				}
				return fmt.Errorf("serve: exec %s: %v%s", bin, err, hint)
			}
			return nil
		},
	}
}

// findDaemon returns the path of homefsd: beside this executable, with
// its symlinks resolved (bin/homefs of a build, /usr/local/bin/homefs of
// an install, a link to either), else the first on $PATH.
func findDaemon() (string, error) {
	beside := ""
	if self, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		beside = filepath.Join(filepath.Dir(self), daemonName)
		if fi, err := os.Stat(beside); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return beside, nil
		}
	}
	p, err := exec.LookPath(daemonName)
	if err == nil {
		return p, nil
	}
	if errors.Is(err, exec.ErrDot) {
		// A relative $PATH entry: refused, as a shell started by root
		// should refuse it.
		return "", fmt.Errorf("serve: %s, the daemon binary, is not beside this homefs (%s), and $PATH finds it only in the current directory, which homefs does not run from: install it beside homefs", daemonName, beside)
	}
	return "", fmt.Errorf("serve: %s, the daemon binary, is neither beside this homefs (%s) nor on $PATH: "+
		"build both with `make build` (bin/homefs, bin/homefsd) or `go install ./cmd/homefs ./cmd/homefsd`, "+
		"and install %s beside homefs (docs/DEPLOY.md)", daemonName, beside, daemonName)
}
