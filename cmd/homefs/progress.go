package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/homefs/homefs/internal/api"
)

// progress draws the progress of a long command on stderr when it is a
// terminal: a bar with rate and ETA when the total is known (bytes when
// they are, else counts), a spinner otherwise, the phase as its
// description. Off (not a terminal, or --json), it writes nothing, so
// scripts and tests read clean output. One bar is drawn per phase, on one
// line, and done clears it before the command prints its result.
//
// It draws itself rather than through a progress bar library: the one it
// used linked net/http and tables of its own whose package
// initialisation every call of homefs paid at start.
type progress struct {
	w     io.Writer // nil when off
	verb  string    // "push", "export"…
	noun  string    // what Done counts: "objects", "entries"
	width func() int

	mu       sync.Mutex
	bar      *bar          // GUARDED_BY(mu); nil until the first report
	drawn    int           // GUARDED_BY(mu); the width of the line on the terminal
	last     time.Time     // GUARDED_BY(mu); when the line was last drawn
	closed   bool          // GUARDED_BY(mu)
	stopSpin chan struct{} // GUARDED_BY(mu); closed to stop the spinner's ticker
}

// bar is what one phase shows; a change of its key starts a new bar (its
// rate and ETA are the new phase's own).
type bar struct {
	key   barKey
	start time.Time
	value int64
	max   int64 // -1 when unknown
	desc  string
	spin  int // the spinner's frame
}

// barKey is what a bar counts.
type barKey struct {
	phase string
	bytes bool // the bar counts bytes, not Done
	known bool // the total is known
}

// Drawing: the bar's width (narrowed to fit the terminal), how often a
// line is drawn again, and the spinner's frames.
const (
	barWidth     = 30
	drawInterval = 100 * time.Millisecond
)

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// newProgress draws on stderr if it is a terminal and quiet (--json) is
// false.
func newProgress(verb, noun string, quiet bool) *progress {
	fd := int(os.Stderr.Fd())
	p := newProgressTo(os.Stderr, !quiet && term.IsTerminal(fd), verb, noun)
	p.width = func() int {
		w, _, err := term.GetSize(fd)
		if err != nil {
			return 0
		}
		return w
	}
	return p
}

// newProgressTo draws on w if on is true.
func newProgressTo(w io.Writer, on bool, verb, noun string) *progress {
	p := &progress{verb: verb, noun: noun, width: func() int { return 0 }}
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
		max = value
	}
	desc := p.verb
	if pr.Phase != "" {
		desc += ": " + pr.Phase
	}
	if k.bytes && !k.known && pr.Done > 0 {
		desc += " " + strconv.FormatInt(pr.Done, 10) + " " + p.noun
	}
	now := time.Now()
	force := false
	if p.bar == nil || k != p.bar.key {
		p.clear()
		p.bar = &bar{key: k, start: now}
		force = true
		if !k.known {
			p.startSpinner()
		}
	}
	b := p.bar
	force = force || desc != b.desc || (k.known && value == max && b.value != value)
	b.value, b.max, b.desc = value, max, desc
	if force || now.Sub(p.last) >= drawInterval {
		p.draw(now)
	}
}

// startSpinner draws a bar of unknown total again every drawInterval, so
// that its spinner turns and its time runs while no report comes.
func (p *progress) startSpinner() {
	t, stop, b := time.NewTicker(drawInterval), make(chan struct{}), p.bar
	p.stopSpin = stop
	go func() {
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				p.mu.Lock()
				if p.bar == b && !p.closed {
					b.spin++
					p.draw(now)
				}
				p.mu.Unlock()
			}
		}
	}()
}

// draw writes the bar's line over the one drawn before.
func (p *progress) draw(now time.Time) {
	line := p.bar.line(now, p.noun, p.width())
	pad := p.drawn - utf8.RuneCountInString(line)
	p.drawn = utf8.RuneCountInString(line)
	if pad < 0 {
		pad = 0
	}
	_, _ = io.WriteString(p.w, "\r"+line+strings.Repeat(" ", pad))
	p.last = now
}

// line is the bar as text: "push: chunks  50% |███       | (2.0/4.0 MiB,
// 1.0 MiB/s) [2s:2s]", or with a spinner "gc: mark ⠋ (3 objects,
// 1 objects/s) [3s]"; at most width runes wide when width is known.
func (b *bar) line(now time.Time, noun string, width int) string {
	elapsed := now.Sub(b.start)
	rate := 0.0
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(b.value) / s
	}
	amount := func(v int64) string {
		if b.key.bytes {
			return humanBytes(v)
		}
		return strconv.FormatInt(v, 10)
	}
	perSecond := strconv.FormatFloat(rate, 'f', 0, 64) + " " + noun + "/s"
	if b.key.bytes {
		perSecond = humanBytes(int64(rate)) + "/s"
	}
	if !b.key.known {
		done := amount(b.value)
		if !b.key.bytes {
			done += " " + noun
		}
		return fmt.Sprintf("%s %s (%s, %s) [%s]", b.desc, spinnerFrames[b.spin%len(spinnerFrames)],
			done, perSecond, roundSeconds(elapsed))
	}
	eta := "?"
	if rate > 0 {
		eta = roundSeconds(time.Duration(float64(b.max-b.value) / rate * float64(time.Second))).String()
	}
	pct := 100
	if b.max > 0 {
		pct = int(b.value * 100 / b.max)
	}
	info := fmt.Sprintf("(%s/%s, %s) [%s:%s]", amount(b.value), amount(b.max), perSecond, roundSeconds(elapsed), eta)
	w := barWidth
	if width > 0 {
		// Room for the description, the percentage and the counts.
		room := width - utf8.RuneCountInString(b.desc) - utf8.RuneCountInString(info) - 10
		w = min(w, max(room, 0))
	}
	filled := w
	if b.max > 0 {
		filled = int(int64(w) * b.value / b.max)
	}
	return fmt.Sprintf("%s %3d%% |%s%s| %s", b.desc, pct, strings.Repeat("█", filled), strings.Repeat(" ", w-filled), info)
}

// roundSeconds is d in whole seconds.
func roundSeconds(d time.Duration) time.Duration { return d.Round(time.Second) }

// clear ends the current bar, if any, and erases its line.
func (p *progress) clear() {
	if p.bar == nil {
		return
	}
	if p.stopSpin != nil {
		close(p.stopSpin)
		p.stopSpin = nil
	}
	_, _ = io.WriteString(p.w, "\r"+strings.Repeat(" ", p.drawn)+"\r")
	p.bar, p.drawn = nil, 0
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
