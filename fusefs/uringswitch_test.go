package fusefs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseURingMode(t *testing.T) {
	for in, want := range map[string]URingMode{"auto": URingAuto, "on": URingOn, "off": URingOff, "false": URingOff} {
		m, err := ParseURingMode(in)
		require.NoError(t, err, in)
		require.Equal(t, want, m, in)
	}
	for _, bad := range []string{"", "true", "yes", "ON", "1"} {
		_, err := ParseURingMode(bad)
		require.Error(t, err, "%q", bad)
	}
	for _, m := range []URingMode{URingOff, URingAuto, URingOn} {
		back, err := ParseURingMode(m.String())
		require.NoError(t, err)
		require.Equal(t, m, back)
	}
}

// fakeSwitch is a uringSwitch over a file standing for the kernel's.
func fakeSwitch(t *testing.T, value string) (*uringSwitch, func() string) {
	p := filepath.Join(t.TempDir(), "enable_uring")
	if value != "" {
		require.NoError(t, os.WriteFile(p, []byte(value+"\n"), 0o644))
	}
	return &uringSwitch{path: p}, func() string {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		return string(b)
	}
}

// TestURingSwitch: the switch is turned on only when off, turned off again
// only by the process that turned it on, after its last holder, and only
// when it is still on.
func TestURingSwitch(t *testing.T) {
	t.Run("off: turned on, then off again after the last holder", func(t *testing.T) {
		w, value := fakeSwitch(t, "N")
		on, err := w.acquire()
		require.NoError(t, err)
		require.True(t, on)
		require.Equal(t, "Y", value())
		on, err = w.acquire() // a second engine of the process
		require.NoError(t, err)
		require.False(t, on)
		require.True(t, w.host(URingOn).Changed)
		restored, err := w.release()
		require.NoError(t, err)
		require.False(t, restored, "a holder is left")
		require.Equal(t, "Y", value())
		restored, err = w.release()
		require.NoError(t, err)
		require.True(t, restored)
		require.Equal(t, "N", value())
		require.Equal(t, URingHost{Mode: URingOn, Switch: "N"}, w.host(URingOn))
	})
	t.Run("on already: never written", func(t *testing.T) {
		w, value := fakeSwitch(t, "Y")
		on, err := w.acquire()
		require.NoError(t, err)
		require.False(t, on)
		restored, err := w.release()
		require.NoError(t, err)
		require.False(t, restored)
		require.Equal(t, "Y\n", value())
	})
	t.Run("turned off by someone else: ensured again, not restored twice", func(t *testing.T) {
		w, value := fakeSwitch(t, "N")
		_, err := w.acquire()
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(w.path, []byte("N"), 0o644)) // another daemon restored it
		on, err := w.ensure()
		require.NoError(t, err)
		require.True(t, on)
		require.Equal(t, "Y", value())
		require.NoError(t, os.WriteFile(w.path, []byte("N"), 0o644))
		restored, err := w.release()
		require.NoError(t, err)
		require.False(t, restored, "it is off already")
		require.Equal(t, "N", value())
	})
	t.Run("no switch: an error, and release still pairs", func(t *testing.T) {
		w, _ := fakeSwitch(t, "")
		_, err := w.acquire()
		require.ErrorIs(t, err, errNoURing)
		restored, err := w.release()
		require.NoError(t, err)
		require.False(t, restored)
		require.Equal(t, 0, w.holders)
		require.Equal(t, "", w.host(URingAuto).Switch)
	})
	t.Run("not writable: an error that says so", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes a read-only file")
		}
		w, value := fakeSwitch(t, "N")
		require.NoError(t, os.Chmod(w.path, 0o444))
		_, err := w.acquire()
		require.ErrorContains(t, err, "cannot be turned on")
		require.False(t, w.host(URingOn).Changed)
		require.Equal(t, "N\n", value())
		_, err = w.release()
		require.NoError(t, err)
	})
}
