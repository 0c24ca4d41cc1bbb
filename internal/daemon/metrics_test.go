package daemon

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/homefs/homefs/fusefs"
)

func TestParseMetricsAddr(t *testing.T) {
	for _, tc := range []struct {
		in, network, addr string
		ok                bool
	}{
		{"127.0.0.1:9477", "tcp", "127.0.0.1:9477", true},
		{"127.0.0.2:0", "tcp", "127.0.0.2:0", true},
		{"[::1]:9477", "tcp", "[::1]:9477", true},
		{"localhost:9477", "tcp", "localhost:9477", true},
		{"unix:/run/homefs/metrics.sock", "unix", "/run/homefs/metrics.sock", true},
		{":9477", "", "", false},         // every interface
		{"0.0.0.0:9477", "", "", false},  // every interface
		{"[::]:9477", "", "", false},     // every interface
		{"10.0.0.5:9477", "", "", false}, // a LAN address
		{"example.com:9477", "", "", false},
		{"127.0.0.1", "", "", false}, // no port
		{"unix:metrics.sock", "", "", false},
	} {
		network, addr, err := ParseMetricsAddr(tc.in)
		if !tc.ok {
			if !errors.Is(err, ErrMetricsAddr) {
				t.Errorf("ParseMetricsAddr(%q) = %q, %q, %v; want ErrMetricsAddr", tc.in, network, addr, err)
			}
			continue
		}
		if err != nil || network != tc.network || addr != tc.addr {
			t.Errorf("ParseMetricsAddr(%q) = %q, %q, %v; want %q, %q", tc.in, network, addr, err, tc.network, tc.addr)
		}
	}
}

// TestMetricsRequestNoAlloc: observing a request allocates nothing, an
// error's counter included once its errno was first seen.
func TestMetricsRequestNoAlloc(t *testing.T) {
	m := newMetrics()
	m.Request(fusefs.OpLookup, syscall.ENOENT, time.Microsecond)
	for _, errno := range []syscall.Errno{0, syscall.ENOENT} {
		if n := testing.AllocsPerRun(100, func() { m.Request(fusefs.OpLookup, errno, time.Microsecond) }); n > 0 {
			t.Errorf("errno %d: a request allocates %v times", errno, n)
		}
	}
}
