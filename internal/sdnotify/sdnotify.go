// Package sdnotify speaks systemd's notification protocol (sd_notify(3)):
// a service of Type=notify tells the service manager it is ready, stopping
// or alive by sending newline-separated KEY=VALUE assignments in one
// datagram to the Unix socket $NOTIFY_SOCKET (a path, or an abstract
// socket when it starts with "@"). A watchdog (WatchdogSec=) expects
// WATCHDOG=1 more often than $WATCHDOG_USEC.
package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"
)

// Notifier sends to one service manager socket. The zero value, or one
// made without $NOTIFY_SOCKET, sends nothing: the service runs outside
// systemd (or as Type=simple).
type Notifier struct {
	socket string
	// Watchdog is the interval the service manager expects WATCHDOG=1
	// within; 0 without a watchdog.
	Watchdog time.Duration
}

// FromEnv returns the notifier of the service manager that started this
// process, and removes its variables from the environment so that
// processes the daemon starts do not talk to it in its name.
func FromEnv() (*Notifier, error) {
	n := &Notifier{socket: os.Getenv("NOTIFY_SOCKET")}
	usec, pid := os.Getenv("WATCHDOG_USEC"), os.Getenv("WATCHDOG_PID")
	for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} {
		os.Unsetenv(k)
	}
	if usec == "" || n.socket == "" {
		return n, nil
	}
	// WATCHDOG_PID names the process the watchdog is for: not ours, not
	// ours to ping.
	if pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return n, nil
	}
	v, err := strconv.ParseUint(usec, 10, 63)
	if err != nil || v == 0 {
		return n, fmt.Errorf("sdnotify: WATCHDOG_USEC=%q: want a positive number of microseconds", usec)
	}
	n.Watchdog = time.Duration(v) * time.Microsecond
	return n, nil
}

// New returns a notifier for socket ("" for none) without a watchdog.
func New(socket string) *Notifier { return &Notifier{socket: socket} }

// Enabled reports whether there is a service manager to notify.
func (n *Notifier) Enabled() bool { return n != nil && n.socket != "" }

// Notify sends state, e.g. "READY=1" or "STOPPING=1\nSTATUS=…", in one
// datagram. Without a socket it does nothing.
func (n *Notifier) Notify(state string) error {
	if !n.Enabled() {
		return nil
	}
	addr := &net.UnixAddr{Name: n.socket, Net: "unixgram"}
	if n.socket[0] == '@' {
		addr.Name = "\x00" + n.socket[1:]
	} else if n.socket[0] != '/' {
		return fmt.Errorf("sdnotify: NOTIFY_SOCKET=%q: want an absolute path or @name", n.socket)
	}
	conn, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("sdnotify: %w", err)
	}
	defer conn.Close()
	_ = conn.SetWriteDeadline(time.Now().Add(time.Second))
	k, err := conn.Write([]byte(state))
	if err == nil && k != len(state) {
		err = errors.New("short write")
	}
	if err != nil {
		return fmt.Errorf("sdnotify: send to %s: %w", n.socket, err)
	}
	return nil
}
