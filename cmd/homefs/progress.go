package main

import (
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/homefs/homefs/internal/api"
)

// progress draws the progress of a long command on stderr when it is a
// terminal: a bar with rate and ETA when the total is known (bytes when
// they are, else counts), a spinner otherwise, the phase as its
// description. Off (not a terminal, or --json), it writes nothing, so
// scripts and tests read clean output. One bar is drawn per phase, on one
// line, and done clears it before the command prints its result.
type progress struct {
	w    io.Writer // nil when off
	verb string    // "push", "export"…
	noun string    // what Done counts: "objects", "entries"

	mu     sync.Mutex
	bar    *progressbar.ProgressBar // GUARDED_BY(mu); nil until the first report
	key    barKey                   // GUARDED_BY(mu)
	max    int64                    // GUARDED_BY(mu); the bar's total, -1 when unknown
	desc   string                   // GUARDED_BY(mu); the bar's description
	closed bool                     // GUARDED_BY(mu)
}

// barKey is what a bar shows; a change of it starts a new bar (its rate
// and ETA are the new phase's own).
type barKey struct {
	phase string
	bytes bool // the bar counts bytes, not Done
	known bool // the total is known
}

// newProgress draws on stderr if it is a terminal and quiet (--json) is
// false.
func newProgress(verb, noun string, quiet bool) *progress {
	return newProgressTo(os.Stderr, !quiet && term.IsTerminal(int(os.Stderr.Fd())), verb, noun)
}

// newProgressTo draws on w if on is true.
func newProgressTo(w io.Writer, on bool, verb, noun string) *progress {
	p := &progress{verb: verb, noun: noun}
	if on {
		p.w = w
	}
	return p
}

// show draws pr: BytesTotal and Bytes when the bytes' total is known,
// else Total and Done, else a spinner with Bytes (or Done).
func (p *progress) show(pr api.Progress) {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	k := barKey{phase: pr.Phase}
	var value, max int64 = pr.Done, -1
	switch {
	case pr.BytesTotal > 0:
		k.bytes, k.known, value, max = true, true, pr.Bytes, pr.BytesTotal
	case pr.Total > 0:
		k.known, max = true, pr.Total
	case pr.Bytes > 0:
		k.bytes, value = true, pr.Bytes
	}
	if k.known && value > max {
		max = value // the library refuses a value past the total
	}
	desc := p.verb
	if pr.Phase != "" {
		desc += ": " + pr.Phase
	}
	if k.bytes && !k.known && pr.Done > 0 {
		desc += " " + strconv.FormatInt(pr.Done, 10) + " " + p.noun
	}
	if p.bar == nil || k != p.key || (p.bar.IsFinished() && max != p.max) {
		// A finished bar draws nothing more: one whose total grew
		// starts again.
		p.clear()
		p.bar = p.newBar(k, max, desc)
		p.key, p.max, p.desc = k, max, desc
	}
	if max != p.max {
		p.bar.ChangeMax64(max)
		p.max = max
	}
	if desc != p.desc {
		p.bar.Describe(desc) // draws a finished bar again
		p.desc = desc
	}
	_ = p.bar.Set64(value)
}

func (p *progress) newBar(k barKey, max int64, desc string) *progressbar.ProgressBar {
	opts := []progressbar.Option{
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(desc),
		progressbar.OptionThrottle(100 * time.Millisecond),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30), // narrowed to fit the terminal
		progressbar.OptionUseIECUnits(true),
		progressbar.OptionSpinnerType(14),
		// Drawn at once, before the spinner's ticker starts: it reads
		// the start time unlocked.
		progressbar.OptionSetRenderBlankState(true),
	}
	if k.bytes {
		opts = append(opts, progressbar.OptionShowBytes(true))
	} else {
		opts = append(opts, progressbar.OptionShowIts(), progressbar.OptionSetItsString(p.noun))
	}
	if !k.known {
		opts = append(opts, progressbar.OptionSetElapsedTime(true), progressbar.OptionSetPredictTime(false),
			progressbar.OptionShowTotalBytes(false)) // not "n/-"
	}
	return progressbar.NewOptions64(max, opts...)
}

// clear ends the current bar, if any, and erases its line.
func (p *progress) clear() {
	if p.bar == nil {
		return
	}
	if !p.bar.IsFinished() {
		// Finish also stops a spinner's ticker; its last drawing is
		// erased right after.
		_ = p.bar.Finish()
	}
	_ = p.bar.Clear()
	p.bar = nil
}

// done erases the bar; nothing is drawn after it.
func (p *progress) done() {
	if p.w == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	p.closed = true
}

// countingWriter counts the bytes written through it and shows them.
type countingWriter struct {
	w io.Writer
	n int64
	p *progress
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	c.p.show(api.Progress{Bytes: c.n})
	return n, err
}

// countingReader counts the bytes read through it and shows them against
// total (0 when unknown).
type countingReader struct {
	r     io.Reader
	n     int64
	total int64
	p     *progress
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	c.p.show(api.Progress{Bytes: c.n, BytesTotal: c.total})
	return n, err
}
