package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/homefs/homefs/internal/api"
)

// TestProgressBarWithTotal: a transfer whose bytes are known draws a bar
// that reaches 100% with a rate, then erases its line.
func TestProgressBarWithTotal(t *testing.T) {
	var w bytes.Buffer
	p := newProgressTo(&w, true, "push", "objects")
	p.show(api.Progress{Phase: "chunks"}) // before the totals are known
	for i := int64(1); i <= 4; i++ {
		p.show(api.Progress{Phase: "chunks", Done: i, Total: 4, Bytes: i << 20, BytesTotal: 4 << 20})
	}
	p.done()
	out := w.String()
	require.Contains(t, out, "push: chunks")
	require.Contains(t, out, "100%")
	require.Regexp(t, `100%.*[0-9.]+ [KMGT]?i?B/s`, out, "no rate")
	require.True(t, strings.HasSuffix(out, "\r"), "the line is not erased at the end: %q", out)
	n := w.Len()
	p.show(api.Progress{Phase: "records", Done: 1, Total: 1})
	require.Equal(t, n, w.Len(), "drawn after done")
}

// TestProgressCountsAndSpinner: counts when only Total is known, a
// spinner when nothing is; each phase gets a bar of its own.
func TestProgressCountsAndSpinner(t *testing.T) {
	var w bytes.Buffer
	p := newProgressTo(&w, true, "gc", "objects")
	p.show(api.Progress{Phase: "mark", Done: 3})
	time.Sleep(250 * time.Millisecond) // the spinner's ticker draws meanwhile
	p.show(api.Progress{Phase: "sweep", Done: 2, Total: 2})
	p.done()
	out := w.String()
	require.Contains(t, out, "gc: mark")
	require.Contains(t, out, "gc: sweep")
	require.Contains(t, out, "objects/s")
	require.Contains(t, out, "100%")
}

// TestProgressOff: without a terminal (or with --json) nothing is written.
func TestProgressOff(t *testing.T) {
	var w bytes.Buffer
	p := newProgressTo(&w, false, "push", "objects")
	p.show(api.Progress{Phase: "chunks"})
	p.show(api.Progress{Phase: "chunks", Done: 1, Total: 1, Bytes: 10, BytesTotal: 10})
	(&countingWriter{w: &bytes.Buffer{}, p: p}).Write([]byte("x"))
	p.done()
	require.Zero(t, w.Len(), "wrote %q", w.String())
}
