package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// permute moves a command's flags in front of its positional arguments,
// so that "homefs capture SESSION -m MSG" works as the help shows it
// (urfave/cli v2 stops reading flags at the first positional argument).
// "--" ends the flags; everything after it stays positional.
func permute(app *cli.App, argv []string) []string {
	if len(argv) < 2 {
		return argv
	}
	out := []string{argv[0]}
	rest := argv[1:]
	// Global flags up to the command name.
	flags := app.Flags
	cmds := app.Commands
	for len(rest) > 0 {
		a := rest[0]
		if strings.HasPrefix(a, "-") && a != "-" {
			n := flagArity(flags, a)
			out = append(out, rest[:min(1+n, len(rest))]...)
			rest = rest[min(1+n, len(rest)):]
			continue
		}
		cmd := findCommand(cmds, a)
		if cmd == nil {
			return append(out, rest...)
		}
		out = append(out, a)
		rest = rest[1:]
		if len(cmd.Subcommands) == 0 {
			flags = cmd.Flags
			break
		}
		flags, cmds = cmd.Flags, cmd.Subcommands
	}
	var fl, pos []string
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		switch {
		case a == "--":
			pos = append(pos, rest[i:]...)
			i = len(rest)
		case strings.HasPrefix(a, "-") && a != "-":
			fl = append(fl, a)
			if n := flagArity(flags, a); n == 1 && i+1 < len(rest) {
				fl = append(fl, rest[i+1])
				i++
			}
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) > 0 && pos[0] != "--" {
		pos = append([]string{"--"}, pos...)
	}
	return append(append(out, fl...), pos...)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.Name == name {
			return c
		}
		for _, a := range c.Aliases {
			if a == name {
				return c
			}
		}
	}
	return nil
}

// flagArity is 1 if the flag a ("-m", "--message", "--message=x") takes
// a separate value, else 0.
func flagArity(flags []cli.Flag, a string) int {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return 0
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n != name {
				continue
			}
			if _, ok := f.(*cli.BoolFlag); ok {
				return 0
			}
			return 1
		}
	}
	return 0
}
