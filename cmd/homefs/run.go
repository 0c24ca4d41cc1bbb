package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/creack/pty"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/homefs/homefs/internal/api"
	"github.com/homefs/homefs/manifest"
)

// providerEnv is the variable that points each provider at its home.
var providerEnv = map[string]string{
	"codex":       "CODEX_HOME",
	"tutti-agent": "CODEX_HOME",
	"claude":      "CLAUDE_CONFIG_DIR",
	"pi":          "PI_CODING_AGENT_DIR",
}

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command with the session shown at its canonical paths",
		ArgsUsage: "SESSION -- CMD [ARGS…]",
		Description: `Runs CMD in a private mount namespace (and PID namespace) in which the
session's provider homes and workspace appear at the canonical paths its
layout records (session create/set --home-at, --workspace-at), so that the
absolute paths providers store stay valid in every fork, restore and move.
CODEX_HOME, CLAUDE_CONFIG_DIR and PI_CODING_AGENT_DIR point at the homes;
CMD starts in the workspace (or --cwd) as --user (root otherwise). A
canonical path that does not exist on the host is created as an empty
directory for the bind mount; a part the session lacks yet is created in
it, owned by --user.

The host sees the session through the daemon's own mount: a mount of the
whole session that every user may enter, or one the daemon makes under
/run/homefs/ and removes when the last run ends. Nothing run mounts is in
the host's mount table, and when homefs run ends (also by kill -9) every
process of CMD's namespace ends with it. Signals homefs run receives are
forwarded to CMD (those a terminal sends its foreground reach CMD
directly). The exit status is CMD's (128+N for signal N). --capture
captures the session when CMD exits, whatever its status.

--lease REMOTE takes the session's lease on REMOTE before the session is
mounted (see "homefs lease"): while another host holds it the run is
refused (exit 4, naming the holder) and CMD never starts. The daemon renews
the lease during the run and releases it when the run ends, unless another
run or mount of the session on this daemon still holds it.

   homefs run agent-1 --user agent -- codex exec "fix the tests"
   homefs run agent-1 --user agent --capture -m "turn 4" -- claude -p "go on" --resume 3f0c…
   homefs run agent-1 --lease origin --user agent --capture -- codex exec "go on"`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "user", Aliases: []string{"u"}, Usage: "run CMD as this user (USER, UID or UID:GID)"},
			&cli.StringFlag{Name: "cwd", Usage: "start CMD here (default: the workspace's canonical path)"},
			&cli.StringSliceFlag{Name: "env", Usage: "KEY=VALUE for CMD, repeatable"},
			&cli.BoolFlag{Name: "capture", Usage: "capture the session when CMD exits"},
			&cli.StringFlag{Name: "message", Aliases: []string{"m"}, Usage: "message of the --capture snapshot"},
			&cli.StringFlag{Name: "lease", Usage: "take the session's lease on this `REMOTE` first (refused, exit 4, while another host holds it); released when the run ends"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			if c.NArg() < 2 {
				return usageError{fmt.Errorf("run: want SESSION -- CMD [ARGS…] (see homefs run --help)")}
			}
			argv := c.Args().Slice()
			cmdArgv := argv[1:]
			if cmdArgv[0] == "--" {
				cmdArgv = cmdArgv[1:]
			}
			if len(cmdArgv) == 0 {
				return usageError{fmt.Errorf("run: no command after --")}
			}
			return runRun(c.Context, client(c), os.Stdout, runOptions{
				session: argv[0], argv: cmdArgv,
				user: c.String("user"), cwd: c.String("cwd"), env: c.StringSlice("env"),
				capture: c.Bool("capture"), message: c.String("message"), lease: c.String("lease"), json: c.Bool("json"),
			})
		},
	}
}

type runOptions struct {
	session   string
	argv      []string
	user, cwd string
	env       []string
	capture   bool
	message   string
	lease     string // a remote's name: hold the session's lease there
	json      bool
}

// runSpec is what homefs run hands the init of the new namespaces.
type runSpec struct {
	// MountDir is the daemon's mount of the whole session.
	MountDir string   `json:"mount_dir"`
	Binds    []nsBind `json:"binds"`
	UID      uint32   `json:"uid"`
	GID      uint32   `json:"gid"`
	// Groups are the user's supplementary groups.
	Groups []uint32 `json:"groups"`
	Env    []string `json:"env"`
	Cwd    string   `json:"cwd"`
	Argv   []string `json:"argv"`
	// TTY: CMD's terminal is the pseudo-terminal at fd 4.
	TTY bool `json:"tty,omitempty"`
}

// nsBind shows Source (a subtree of the session, "" for its root) at
// Target (an absolute path).
type nsBind struct {
	Source string `json:"source"`
	Target string `json:"target"`
}

// exitStatus is CMD's exit status, passed through as homefs run's.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("command exited with status %d", int(e)) }

// runInitCommand is the hidden command homefs run starts in the new
// namespaces.
const runInitCommand = "__run-init"

func runRun(ctx context.Context, cl *api.Client, out io.Writer, o runOptions) error {
	if err := manifest.ValidateSessionName(o.session); err != nil {
		return usageError{err}
	}
	if os.Geteuid() != 0 {
		return errors.New("homefs run needs root (it makes a mount namespace and bind mounts); run it as root with --user for the agent")
	}
	spec := runSpec{Argv: o.argv}
	if o.user != "" {
		if err := lookupRunUser(o.user, &spec); err != nil {
			return err
		}
	}
	// The run holds the daemon's mount until it ends: a signal that ends
	// the command must not drop the hold before the command is gone.
	hold, err := cl.RunMount(context.WithoutCancel(ctx), o.session, o.lease)
	if err != nil {
		return err
	}
	defer hold.Release()
	if err := ctx.Err(); err != nil {
		return err // interrupted while the mount was made: run nothing
	}
	if err := placeRun(&spec, hold, o); err != nil {
		return err
	}
	status, lost, err := runInNamespaces(spec, hold.Lost)
	hold.Release()
	if err != nil {
		return err
	}
	return runEnded(ctx, cl, out, o, status, lost)
}

// placeRun fills in spec what the run of o in hold's mount shows where:
// the binds of the layout's canonical paths, CMD's environment, its
// working directory and the daemon's mount.
func placeRun(spec *runSpec, hold *api.RunHold, o runOptions) error {
	env := runEnv(os.Environ(), o.user != "", *spec)
	env = bindPlaces(spec, env, hold.Layout, o.session)
	if len(spec.Binds) == 0 {
		return usageError{fmt.Errorf("session %s records no canonical paths: set them with homefs session set %s --home-at PROVIDER=PATH --workspace-at PATH", o.session, o.session)}
	}
	env = unsetEnv(env, "CODEX_SQLITE_HOME") // Codex's databases belong in its home
	for _, kv := range o.env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return usageError{fmt.Errorf("--env %q: want KEY=VALUE", kv)}
		}
		env = setEnv(env, k, v)
	}
	spec.Env = env
	spec.Cwd = o.cwd
	if spec.Cwd == "" {
		if w := hold.Layout.Workspace; w != nil && w.At != "" {
			spec.Cwd = w.At
		} else {
			spec.Cwd = spec.Binds[0].Target
		}
	}
	spec.MountDir = hold.Dir
	return nil
}

// bindPlaces adds to spec a bind for each place of layout that has a
// canonical path, and returns env with each provider's variable pointing
// at its home's.
func bindPlaces(spec *runSpec, env []string, layout *manifest.Layout, session string) []string {
	places := layout.Places()
	// Parents first: a canonical path may lie below another.
	slices.SortFunc(places, func(a, b manifest.Place) int { return strings.Compare(a.At, b.At) })
	for _, p := range places {
		if v, ok := providerEnv[p.Provider]; ok {
			env = unsetEnv(env, v) // never a home outside the session
		}
		if p.At == "" {
			name := p.Provider
			if name == "" {
				name = "the workspace"
			}
			fmt.Fprintf(os.Stderr, "homefs: warning: %s (%s) has no canonical path and is not shown in the run (homefs session set %s --home-at/--workspace-at)\n", name, displaySubtree(p.Subtree), session)
			continue
		}
		spec.Binds = append(spec.Binds, nsBind{Source: p.Subtree, Target: p.At})
		if v, ok := providerEnv[p.Provider]; ok {
			env = setEnv(env, v, p.At)
		}
	}
	return env
}

// runEnded is homefs run's outcome once CMD ended with status: the hold
// lost, the --capture, then CMD's status.
func runEnded(ctx context.Context, cl *api.Client, out io.Writer, o runOptions, status int, lost bool) error {
	if lost {
		fmt.Fprintf(os.Stderr, "homefs run: the daemon stopped serving %s during the run; the command was ended, and what it wrote last may be lost (see the daemon's log)\n", o.session)
		return exitStatus(runLostStatus)
	}
	if o.capture {
		if err := captureAfterRun(ctx, cl, out, o); err != nil {
			if status == 0 {
				return err
			}
			// The command's failure is the news; the capture's follows.
			fmt.Fprintln(os.Stderr, "homefs:", err)
		}
	}
	if status != 0 {
		return exitStatus(status)
	}
	return nil
}

// Statuses of homefs run's own failures, apart from any CMD has (as
// env(1) and docker run keep 125 for their own): the run could not be set
// up, or the daemon stopped serving the session during it.
const (
	runSetupStatus = 125
	runLostStatus  = 125
)

func captureAfterRun(ctx context.Context, cl *api.Client, out io.Writer, o runOptions) error {
	msg := o.message
	if msg == "" {
		msg = "homefs run: " + strings.Join(o.argv, " ")
		if len(msg) > 200 {
			msg = msg[:200]
		}
	}
	snap, err := cl.Capture(context.WithoutCancel(ctx), o.session, api.CaptureRequest{Message: msg})
	if err != nil {
		return fmt.Errorf("capture after the command: %w", err)
	}
	if o.json {
		return printJSON(out, snap)
	}
	fmt.Fprintf(os.Stderr, "homefs: captured %s as %s\n", o.session, snap.ID)
	return nil
}

// runInNamespaces starts the namespaces' init with spec, forwards signals
// to it, and returns CMD's exit status; lost says that the daemon ended
// the hold meanwhile (CMD was then told to end).
//
// On a terminal, CMD gets a pseudo-terminal of its own, in a session of
// its own, which homefs run relays to and from its terminal (as sudo's
// use_pty does): CMD runs as another user and must not reach the caller's
// terminal, where TIOCSTI would type commands into root's shell, and the
// terminal's keys (Ctrl-C) reach CMD once, through its own terminal.
func runInNamespaces(spec runSpec, lost <-chan struct{}) (status int, wasLost bool, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, false, err
	}
	// The spec (CMD's environment: API keys) goes through a pipe, never
	// an argument that ps shows.
	r, w, err := os.Pipe()
	if err != nil {
		return 0, false, err
	}
	defer r.Close()
	cmd := exec.Command(self, runInitCommand)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{r} // fd 3
	var ptmx *os.File
	if term.IsTerminal(int(os.Stdin.Fd())) && term.IsTerminal(int(os.Stdout.Fd())) {
		var tty *os.File
		if ptmx, tty, err = openRunPTY(spec.UID, spec.GID); err != nil {
			return 0, false, err
		}
		defer ptmx.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, tty) // fd 4
		spec.TTY = true
		defer tty.Close()
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return 0, false, err
	}
	cmd.Env = []string{}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		// The init dies with homefs run, and every process of its PID
		// namespace with it: nothing outlives the run.
		Pdeathsig: syscall.SIGKILL,
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	done, err := startRunInit(cmd, w, b)
	if err != nil {
		return 0, false, err
	}
	relayed, restore := relayTerminal(ptmx, cmd.ExtraFiles[1:])
	defer restore()
	status, wasLost = waitRunInit(cmd.Process, ptmx, sigs, lost, done, relayed)
	return status, wasLost, nil
}

// openRunPTY opens CMD's pseudo-terminal, the size of homefs run's, its
// terminal end owned by uid:gid.
func openRunPTY(uid, gid uint32) (ptmx, tty *os.File, err error) {
	if ptmx, tty, err = pty.Open(); err != nil {
		return nil, nil, fmt.Errorf("pseudo-terminal for the command: %w", err)
	}
	_ = pty.InheritSize(os.Stdin, ptmx)
	if err := os.Chown(tty.Name(), int(uid), int(gid)); err != nil {
		tty.Close()
		ptmx.Close()
		return nil, nil, fmt.Errorf("pseudo-terminal for the command: %w", err)
	}
	return ptmx, tty, nil
}

// runInitResult is how the namespaces' init ended.
type runInitResult struct {
	state *os.ProcessState
	err   error
}

// startRunInit starts cmd, the namespaces' init, hands it the spec b
// through w, and returns where its end is told.
func startRunInit(cmd *exec.Cmd, w *os.File, b []byte) (<-chan runInitResult, error) {
	// Pdeathsig follows the thread that started the child: keep it.
	done := make(chan runInitResult, 1)
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_, werr := w.Write(b)
		w.Close()
		if werr != nil {
			_ = cmd.Process.Kill()
		}
		err := cmd.Wait()
		done <- runInitResult{cmd.ProcessState, err}
	}()
	if err := <-started; err != nil {
		w.Close()
		return nil, fmt.Errorf("start the run's namespaces: %w", err)
	}
	return done, nil
}

// relayTerminal, on a pseudo-terminal ptmx, closes homefs run's copies of
// its terminal ends ttys, puts homefs run's terminal in raw mode and
// relays between the two; relayed is closed once CMD's last output is
// copied (at once without ptmx), and restore gives the terminal back its
// mode.
func relayTerminal(ptmx *os.File, ttys []*os.File) (relayed <-chan struct{}, restore func()) {
	done := make(chan struct{})
	restore = func() {}
	if ptmx == nil {
		close(done)
		return done, restore
	}
	for _, f := range ttys {
		f.Close() // the init has its copy; CMD's end then shows on ptmx
	}
	old, err := term.MakeRaw(int(os.Stdin.Fd()))
	if err == nil {
		restore = func() { _ = term.Restore(int(os.Stdin.Fd()), old) }
	}
	go func() { _, _ = io.Copy(ptmx, os.Stdin) }()
	go func() { _, _ = io.Copy(os.Stdout, ptmx); close(done) }()
	return done, restore
}

// waitRunInit forwards sigs to the init, tells it to end once the hold is
// lost, and returns CMD's status when the init ends.
func waitRunInit(proc *os.Process, ptmx *os.File, sigs <-chan os.Signal, lost <-chan struct{}, done <-chan runInitResult, relayed <-chan struct{}) (status int, wasLost bool) {
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGWINCH {
				if ptmx != nil {
					_ = pty.InheritSize(os.Stdin, ptmx) // the kernel tells CMD
				}
				continue
			}
			_ = proc.Signal(sig)
		case <-lost:
			if !wasLost {
				wasLost = true
				_ = proc.Signal(syscall.SIGTERM)
			}
		case res := <-done:
			if ptmx != nil {
				<-relayed // CMD's last output
			}
			return statusOf(res.state), wasLost
		}
	}
}

// forwarded are the signals homefs run passes on to CMD (SIGWINCH: to its
// pseudo-terminal).
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGCONT}

// statusOf is a process's status as a shell reports it.
func statusOf(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// lookupRunUser fills spec's credentials from USER, UID or UID:GID.
func lookupRunUser(s string, spec *runSpec) error {
	name, group, hasGroup := strings.Cut(s, ":")
	var u *user.User
	var err error
	if _, nerr := strconv.ParseUint(name, 10, 32); nerr == nil {
		u, err = lookupUserID(name)
		if err != nil {
			// A uid without a passwd entry is a valid agent user too.
			u, err = &user.User{Uid: name, Gid: name, HomeDir: "/"}, nil
		}
	} else {
		u, err = lookupUser(name)
	}
	if err != nil {
		return usageError{fmt.Errorf("--user %q: %w", s, err)}
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	if hasGroup {
		if gid, err = strconv.ParseUint(group, 10, 32); err != nil {
			g, err := lookupGroup(group)
			if err != nil {
				return usageError{fmt.Errorf("--user %q: %w", s, err)}
			}
			gid, _ = strconv.ParseUint(g.Gid, 10, 32)
		}
	}
	spec.UID, spec.GID = uint32(uid), uint32(gid)
	if ids, err := groupIDs(u); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil {
				spec.Groups = append(spec.Groups, uint32(g))
			}
		}
	}
	if u.Username != "" {
		spec.Env = []string{"USER=" + u.Username, "LOGNAME=" + u.Username}
	}
	spec.Env = append(spec.Env, "HOME="+u.HomeDir)
	return nil
}

// runEnv is CMD's environment. Run as root it is homefs run's own without
// its HOMEFS_ settings; dropped to --user, a fresh one: root's environment
// holds what an agent must not see (the daemon's S3 keys, an SSH agent,
// root's PATH and runtime directory), so only the terminal's and the
// locale's settings pass, with the user's HOME, USER and LOGNAME and a
// standard PATH; --env adds the rest.
func runEnv(base []string, asUser bool, spec runSpec) []string {
	if !asUser {
		return slices.DeleteFunc(slices.Clone(base), func(kv string) bool { return strings.HasPrefix(kv, "HOMEFS_") })
	}
	env := []string{"PATH=" + userPath}
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if k == "TERM" || k == "LANG" || k == "TZ" || k == "COLORTERM" || k == "NO_COLOR" || strings.HasPrefix(k, "LC_") {
			env = append(env, kv)
		}
	}
	for _, kv := range spec.Env {
		k, v, _ := strings.Cut(kv, "=")
		env = setEnv(env, k, v)
	}
	return env
}

// userPath is the PATH of a command run as another user.
const userPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// unsetEnv removes k from env.
func unsetEnv(env []string, k string) []string {
	return slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
}

// setEnv sets k to v in env.
func setEnv(env []string, k, v string) []string {
	env = slices.DeleteFunc(env, func(kv string) bool { return strings.HasPrefix(kv, k+"=") })
	return append(env, k+"="+v)
}
