package sdnotify

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// listen is a service manager's socket: a unix datagram socket at path
// (or abstract, "@name").
func listen(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	addr := &net.UnixAddr{Name: name, Net: "unixgram"}
	if name[0] == '@' {
		addr.Name = "\x00" + name[1:]
	}
	c, err := net.ListenUnixgram("unixgram", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	buf := make([]byte, 4096)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	k, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	return string(buf[:k])
}

func TestNotify(t *testing.T) {
	for _, name := range []string{
		filepath.Join(t.TempDir(), "notify"),
		fmt.Sprintf("@homefs-sdnotify-test-%d", os.Getpid()),
	} {
		c := listen(t, name)
		n := New(name)
		for _, state := range []string{"READY=1\nSTATUS=serving", "WATCHDOG=1", "STOPPING=1"} {
			if err := n.Notify(state); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got := receive(t, c); got != state {
				t.Errorf("%s: got %q, want %q", name, got, state)
			}
		}
	}
}

func TestNotifyWithoutManager(t *testing.T) {
	for _, n := range []*Notifier{nil, {}, New("")} {
		if n.Enabled() {
			t.Error("enabled without a socket")
		}
		if err := n.Notify("READY=1"); err != nil {
			t.Error(err)
		}
	}
	// A socket nobody listens on is an error to log, not a crash.
	if err := New(filepath.Join(t.TempDir(), "gone")).Notify("READY=1"); err == nil {
		t.Error("no error for a missing socket")
	}
	if err := New("relative").Notify("READY=1"); err == nil {
		t.Error("no error for a relative socket path")
	}
}

func TestFromEnv(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify")
	me := strconv.Itoa(os.Getpid())
	for _, c := range []struct {
		name, socket, usec, pid string
		want                    time.Duration
		wantErr                 bool
	}{
		{"no manager", "", "", "", 0, false},
		{"no watchdog", sock, "", "", 0, false},
		{"watchdog", sock, "30000000", "", 30 * time.Second, false},
		{"watchdog for us", sock, "1500000", me, 1500 * time.Millisecond, false},
		{"watchdog for another process", sock, "1500000", "1", 0, false},
		{"bad interval", sock, "soon", "", 0, true},
		{"zero interval", sock, "0", "", 0, true},
	} {
		t.Setenv("NOTIFY_SOCKET", c.socket)
		t.Setenv("WATCHDOG_USEC", c.usec)
		t.Setenv("WATCHDOG_PID", c.pid)
		n, err := FromEnv()
		if (err != nil) != c.wantErr {
			t.Errorf("%s: err %v", c.name, err)
		}
		if n.Watchdog != c.want {
			t.Errorf("%s: watchdog %v, want %v", c.name, n.Watchdog, c.want)
		}
		if n.Enabled() != (c.socket != "") {
			t.Errorf("%s: enabled %v", c.name, n.Enabled())
		}
		for _, k := range []string{"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"} {
			if _, ok := os.LookupEnv(k); ok {
				t.Errorf("%s: %s left in the environment", c.name, k)
			}
		}
	}
}
