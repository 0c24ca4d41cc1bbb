package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestPermute(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// A command's flags go in front of its positional arguments.
		{"capture s -m msg", "capture -m msg -- s"},
		{"session list --json", "session list --json"},
		// The app's flags, anywhere a command's flags are, go in front of
		// the command name.
		{"session list --root R", "--root R session list"},
		{"session list --root R --json", "--root R session list --json"},
		{"session --socket S list", "--socket S session list"},
		{"mount s /mnt --socket S --read-only", "--socket S mount --read-only -- s /mnt"},
		{"--root A stats --root B", "--root A --root B stats"},
		// serve's arguments are homefsd's, as they are.
		{"serve --root R", "serve --root R"},
		{"serve --root=R --log-level debug", "serve --root=R --log-level debug"},
		{"--root A serve --root B -- x", "--root A serve --root B -- x"},
		// "--" ends the flags: what follows stays positional.
		{"import - s -- --root", "import -- - s --root"},
		{"capture s -- -m", "capture -- s -m"},
		{"capture --", "capture --"},
		{"capture -- --root R", "capture -- --root R"},
		{"session create -- --root", "session create -- --root"},
		// Unknown commands and flags are left for urfave/cli to refuse.
		{"bogus --root R", "bogus --root R"},
		{"serve --root", "serve --root"},
		{"stats --root", "--root"},
		{"capture s -m", "capture -m -- s"},
		{"capture s --root R -m", "--root R capture -m -- s"},
		{"session create x --bogus", "session create --bogus -- x"},
	} {
		got := permute(newApp(), append([]string{"homefs"}, strings.Fields(tc.in)...))
		require.Equal(t, "homefs "+tc.want, strings.Join(got, " "), "homefs %s", tc.in)
	}
}
