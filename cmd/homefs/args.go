package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// permute moves a command's flags in front of its positional arguments,
// so that "homefs capture SESSION -m MSG" works as the help shows it.
// It exists because of urfave/cli v2, the project's fixed choice of CLI
// library: v2 parses a command's flags with the standard flag package,
// which stops at the first positional argument, so the "-m MSG" above
// would arrive as two more arguments. urfave/cli v3 reads flags after
// positional arguments itself and would make this unnecessary; the
// project stays on v2, so it stays.
//
// The app's own flags (--root, --socket) are accepted wherever a
// command's flags are and moved in front of the command name, the only
// place urfave/cli reads them; a command's flag of the same name wins.
// "--" ends the flags; everything after it stays positional. A command
// that parses no flags of its own (serve, which hands its arguments to
// homefsd) gets its arguments as they are.
func permute(app *cli.App, argv []string) []string {
	if len(argv) < 2 {
		return argv
	}
	out := []string{argv[0]}
	rest := argv[1:]
	var global []string // app flags found after the command name
	noValue := false    // the last argument is an app flag that wants a value
	// takeFlag moves the flag at rest[i] (and its value) into dst and
	// returns the index after it.
	takeFlag := func(dst *[]string, flags []cli.Flag, i int) int {
		end := i + 1 + flagArity(flags, rest[i])
		if end > len(rest) {
			end, noValue = len(rest), dst == &global
		}
		*dst = append(*dst, rest[i:end]...)
		return end
	}
	// App flags, command and subcommand names, and the flags between them.
	flags := app.Flags
	cmds := app.Commands
	cmdStart := -1 // index in out of the first command name
	for len(rest) > 0 {
		a := rest[0]
		if isFlag(a) {
			if cmdStart >= 0 && isAppFlag(app, flags, a) {
				rest = rest[takeFlag(&global, app.Flags, 0):]
			} else {
				rest = rest[takeFlag(&out, flags, 0):]
			}
			continue
		}
		cmd := findCommand(cmds, a)
		if cmd == nil {
			out = append(out, rest...)
			rest = nil
			break
		}
		if cmdStart < 0 {
			cmdStart = len(out)
		}
		out = append(out, a)
		rest = rest[1:]
		flags = cmd.Flags
		if cmd.SkipFlagParsing {
			// serve: every argument is homefsd's, as it is.
			out = append(out, rest...)
			rest = nil
			break
		}
		if len(cmd.Subcommands) == 0 {
			break
		}
		cmds = cmd.Subcommands
	}
	var fl, pos []string
	dashes := false
	for i := 0; i < len(rest); {
		a := rest[i]
		switch {
		case a == "--":
			pos = append(pos, rest[i+1:]...)
			i, dashes = len(rest), true
		case isFlag(a) && isAppFlag(app, flags, a):
			i = takeFlag(&global, app.Flags, i)
		case isFlag(a):
			i = takeFlag(&fl, flags, i)
		default:
			pos = append(pos, a)
			i++
		}
	}
	// One "--" in front of every positional argument, so that none of
	// them is read as a flag.
	if len(pos) > 0 || dashes {
		pos = append([]string{"--"}, pos...)
	}
	if cmdStart >= 0 && len(global) > 0 {
		if noValue {
			// "--root" without its value, last: urfave/cli says so.
			return append(out[:cmdStart], global...)
		}
		// After the app flags given before the command: the later wins.
		out = append(out[:cmdStart], append(global, out[cmdStart:]...)...)
	}
	return append(append(out, fl...), pos...)
}

func isFlag(a string) bool { return strings.HasPrefix(a, "-") && a != "-" && a != "--" }

// isAppFlag reports whether a names one of the app's flags and none of
// the command's (whose flags are cmdFlags).
func isAppFlag(app *cli.App, cmdFlags []cli.Flag, a string) bool {
	return lookupFlag(app.Flags, a) != nil && lookupFlag(cmdFlags, a) == nil
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

// lookupFlag returns the flag that a ("-m", "--message", "--message=x")
// names, or nil.
func lookupFlag(flags []cli.Flag, a string) cli.Flag {
	name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				return f
			}
		}
	}
	return nil
}

// flagArity is 1 if the flag a ("-m", "--message", "--message=x") takes
// a separate value, else 0.
func flagArity(flags []cli.Flag, a string) int {
	if strings.Contains(a, "=") {
		return 0
	}
	f := lookupFlag(flags, a)
	if f == nil {
		return 0
	}
	if _, ok := f.(*cli.BoolFlag); ok {
		return 0
	}
	return 1
}
