package fusefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
)

// URingMode says whether an Engine serves its mounts through FUSE over
// io_uring, and whether it may change the host to do so. The kernel's
// switch (uringSwitchPath) is the host's, shared with every other FUSE
// daemon: the default never writes it.
type URingMode int

const (
	// URingOff serves every mount over /dev/fuse.
	URingOff URingMode = iota
	// URingAuto uses io_uring where the host's switch is already on, and
	// never changes it.
	URingAuto
	// URingOn turns the switch on if it is off, and turns it back off when
	// the engine closes (if nothing else turned it off meanwhile).
	URingOn
)

// ParseURingMode parses "auto", "on" or "off" ("false" is "off", as the
// boolean flag of earlier versions said).
func ParseURingMode(s string) (URingMode, error) {
	switch s {
	case "auto":
		return URingAuto, nil
	case "on":
		return URingOn, nil
	case "off", "false":
		return URingOff, nil
	}
	return 0, fmt.Errorf("FUSE over io_uring mode %q: want auto, on or off", s)
}

func (m URingMode) String() string {
	switch m {
	case URingOff:
		return "off"
	case URingAuto:
		return "auto"
	case URingOn:
		return "on"
	}
	return fmt.Sprintf("URingMode(%d)", int(m))
}

// uringSwitchPath is the kernel's switch for FUSE over io_uring: the
// kernel offers io_uring to a connection at INIT only while it is on, and
// keeps it on a connection that has it when the switch goes off.
const uringSwitchPath = "/sys/module/fuse/parameters/enable_uring"

// errNoURing is a kernel without FUSE over io_uring (before 6.14, or built
// without CONFIG_FUSE_IO_URING).
var errNoURing = errors.New("kernel without FUSE over io_uring")

// uringSwitch is the host's switch as one process uses it. Every engine
// of the process in URingOn mode holds it; the process turns it off again
// when the last holder lets go, and only if this process turned it on.
// It is process-wide state because the switch is host-wide: two engines
// of one process (tests) must not restore it under each other's mounts.
type uringSwitch struct {
	path string

	mu      sync.Mutex
	holders int  // engines in URingOn mode; GUARDED_BY(mu)
	changed bool // this process turned it on and has not restored it; GUARDED_BY(mu)
}

var hostURing = &uringSwitch{path: uringSwitchPath}

// URingHost is the host's switch as an engine sees it.
type URingHost struct {
	Mode URingMode
	// Switch is the switch's value ("Y" or "N"), "" if the kernel has none.
	Switch string
	// Changed is set while this process has turned the switch on; it turns
	// it back off when it closes.
	Changed bool
}

// read returns the switch's value, "Y" or "N".
func (w *uringSwitch) read() (string, error) {
	b, err := os.ReadFile(w.path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w (no %s)", errNoURing, w.path)
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", w.path, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// on reports whether the kernel offers io_uring to new connections.
func (w *uringSwitch) on() (bool, error) {
	v, err := w.read()
	return v == "Y", err
}

// host reports the switch for an engine in mode.
func (w *uringSwitch) host(mode URingMode) URingHost {
	v, _ := w.read()
	w.mu.Lock()
	defer w.mu.Unlock()
	return URingHost{Mode: mode, Switch: v, Changed: w.changed}
}

// acquire holds the switch and turns it on if it is off. It reports
// whether this call turned it on; the hold stands even when it fails, so
// that release is always paired with it.
func (w *uringSwitch) acquire() (turnedOn bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holders++
	return w.ensureLocked()
}

// ensure turns the switch on again if something turned it off while it
// is held (another daemon that restored it): a mount checks before INIT.
func (w *uringSwitch) ensure() (turnedOn bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ensureLocked()
}

func (w *uringSwitch) ensureLocked() (bool, error) {
	v, err := w.read()
	if err != nil || v == "Y" {
		return false, err
	}
	if err := os.WriteFile(w.path, []byte("Y"), 0); err != nil {
		return false, fmt.Errorf("FUSE over io_uring is off (%s is %s) and cannot be turned on: %w", w.path, v, err)
	}
	w.changed = true
	return true, nil
}

// release lets go of a hold. The last holder turns the switch back off if
// this process turned it on and it is still on; restored reports it.
func (w *uringSwitch) release() (restored bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.holders--
	if w.holders > 0 || !w.changed {
		return false, nil
	}
	w.changed = false
	v, err := w.read()
	if err != nil || v != "Y" {
		// Someone else turned it off already: nothing of ours to undo.
		return false, err
	}
	if err := os.WriteFile(w.path, []byte("N"), 0); err != nil {
		return false, fmt.Errorf("restore %s to N: %w", w.path, err)
	}
	return true, nil
}

// holdURing takes the host's switch for an engine in URingOn mode, and
// says what it changed.
func (e *Engine) holdURing() {
	if e.uring != URingOff && os.Geteuid() != 0 {
		// Mounts go through fusermount3, which speaks /dev/fuse alone.
		return
	}
	if e.uring != URingOn {
		if e.uring == URingAuto {
			if on, err := hostURing.on(); err == nil && !on {
				e.log.Info("FUSE over io_uring is off on this host: mounts are served over /dev/fuse (serve --fuse-uring=on turns it on)", "switch", hostURing.path)
			}
		}
		return
	}
	e.mu.Lock()
	e.uringHeld = true
	e.mu.Unlock()
	turnedOn, err := hostURing.acquire()
	switch {
	case err != nil:
		e.log.Warn("FUSE over io_uring unavailable: mounts are served over /dev/fuse", "err", err)
	case turnedOn:
		e.log.Warn("turned on FUSE over io_uring for the whole host; turned off again at a clean exit", "switch", hostURing.path, "was", "N", "now", "Y")
	}
}

// releaseURing lets go of the host's switch, once.
func (e *Engine) releaseURing() {
	e.mu.Lock()
	held := e.uringHeld
	e.uringHeld = false
	e.mu.Unlock()
	if !held {
		return
	}
	restored, err := hostURing.release()
	if err != nil {
		e.log.Error("could not turn FUSE over io_uring off again", "switch", hostURing.path, "err", err)
	} else if restored {
		e.log.Info("turned FUSE over io_uring off again, as it was before", "switch", hostURing.path, "was", "Y", "now", "N")
	}
}

// uringUsable says whether the mount at dir is to be tried over io_uring:
// the switch is on (turned on again in URingOn mode if something turned it
// off) and the daemon may mount itself.
func (e *Engine) uringUsable(dir string) bool {
	if e.uring == URingOff || os.Geteuid() != 0 {
		return false
	}
	if e.uring == URingOn {
		turnedOn, err := hostURing.ensure()
		if err != nil {
			e.log.Warn("serving over /dev/fuse", "mount", dir, "err", err)
			return false
		}
		if turnedOn {
			e.log.Warn("turned on FUSE over io_uring for the whole host again (something turned it off); turned off again at a clean exit", "switch", hostURing.path, "was", "N", "now", "Y")
		}
		return true
	}
	on, err := hostURing.on()
	return err == nil && on
}

// URingHost reports the engine's io_uring mode and the host's switch.
func (e *Engine) URingHost() URingHost { return hostURing.host(e.uring) }
