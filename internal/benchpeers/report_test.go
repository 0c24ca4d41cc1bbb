package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixture is a run of two rounds with every kind of target, where the
// kernel overlay is the fastest peer and fuse-overlayfs the only FUSE one.
func fixture() *Results {
	r := &Results{
		Count:     2,
		Targets:   []string{nameExt4, nameOverlay, nameFuseOvl, nameHomeURing},
		Skipped:   []Skip{{nameHomeDev, "no /dev/fuse"}},
		Workloads: []Workload{{"untar", "untar"}, {"jsonl", "appends, O_RDWR|O_APPEND"}},
	}
	add := func(target, key string, secs ...float64) {
		for i, s := range secs {
			r.add(target, key, i, time.Duration(s*float64(time.Second)))
		}
	}
	add(nameExt4, "untar", 0.5, 0.6)
	add(nameOverlay, "untar", 0.55, 0.7)
	add(nameFuseOvl, "untar", 8, 6)
	add(nameHomeURing, "untar", 1.5, 1.25)
	add(nameExt4, "jsonl", 0.25, 0.25)
	add(nameOverlay, "jsonl", 0.3, 0.3)
	add(nameFuseOvl, "jsonl", 0.6, 0.9)
	// homefs has no jsonl sample: its ratios are dashes.
	return r
}

func rows(t *testing.T, text string) [][]string {
	t.Helper()
	var out [][]string
	for _, l := range strings.Split(strings.TrimSpace(text), "\n") {
		if !strings.HasPrefix(l, "| ") {
			continue
		}
		cells := strings.Split(strings.ReplaceAll(strings.Trim(l, "| "), `\|`, "¦"), " | ")
		out = append(out, cells)
	}
	return out
}

func TestTable(t *testing.T) {
	var b bytes.Buffer
	table(&b, fixture())
	got := rows(t, b.String())
	require.Len(t, got, 3, b.String())
	assert.Equal(t, []string{"workload (seconds, min–max of 2)", "ext4", "overlayfs", "fuse-overlayfs", "homefs io_uring",
		"homefs io_uring ÷ ext4", "homefs io_uring ÷ best FUSE peer"}, got[0])
	// Fastest over fastest: 1.25 ÷ 0.5 and 1.25 ÷ 6 (fuse-overlayfs, not the faster kernel overlay).
	assert.Equal(t, []string{"untar", "0.500–0.600", "0.550–0.700", "6.00–8.00", "1.25–1.50", "2.50×", "0.21× (fuse-overlayfs)"}, got[1])
	assert.Equal(t, []string{"appends, O_RDWR¦O_APPEND", "0.250", "0.300", "0.600–0.900", "—", "—", "—"}, got[2])
	assert.Contains(t, b.String(), "homefs /dev/fuse skipped: no /dev/fuse")
}

func TestTableWithoutFUSEPeer(t *testing.T) {
	r := fixture()
	r.Targets = []string{nameExt4, nameOverlay, nameHomeURing}
	var b bytes.Buffer
	table(&b, r)
	got := rows(t, b.String())
	require.Len(t, got, 3)
	assert.Equal(t, []string{"untar", "0.500–0.600", "0.550–0.700", "1.25–1.50", "2.50×", "—"}, got[1])
}

func TestSnapshotTable(t *testing.T) {
	r := &Results{Count: 2, SnapshotCount: 2}
	for i, s := range []float64{0.012, 0.015} {
		r.addSnapshot(nameSnapHomefs, "capture", i, time.Duration(s*float64(time.Second)))
	}
	r.addSnapshot(nameSnapBtrfs, "capture", 0, 6*time.Millisecond)
	r.addSnapshot(nameSnapAPI, "capture", 0, 3*time.Millisecond)
	r.addSnapshot(nameSnapHomefs, "fork", 0, 9*time.Millisecond)
	var b bytes.Buffer
	snapshotTable(&b, r)
	got := rows(t, b.String())
	require.Len(t, got, 3, b.String())
	assert.Equal(t, []string{"capture", "12.0–15.0", "3.0", "6.0", "2.00×", "0.50×"}, got[1])
	assert.Equal(t, []string{"fork", "9.0", "—", "—", "—", "—"}, got[2])

	b.Reset()
	snapshotTable(&b, &Results{})
	assert.Empty(t, b.String(), "no snapshot rows, no table")
}

func TestSeconds(t *testing.T) {
	for x, want := range map[float64]string{0.00123: "0.0012", 0.25: "0.250", 1.234: "1.23", 12.34: "12.3", 123.4: "123"} {
		assert.Equal(t, want, seconds(x), "%v", x)
	}
}

func TestChart(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, chart(&b, fixture()))
	svg := b.String()
	for _, want := range []string{"overlayfs", "fuse-overlayfs", "homefs io_uring", "untar", "jsonl", "1×"} {
		assert.Contains(t, svg, want)
	}
	// Well-formed XML throughout.
	d := xml.NewDecoder(strings.NewReader(svg))
	for {
		_, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
}

func TestScaleFromEnv(t *testing.T) {
	for _, tc := range []struct {
		scale, count string
		want         int
		ok           bool
	}{
		{"", "", 2, true},
		{"small", "3", 3, true},
		{"", "0", 0, false},
		{"", "x", 0, false},
		{"", "101", 0, false},
	} {
		t.Setenv("HOMEFS_BENCH_SCALE", tc.scale)
		t.Setenv("BENCHCOUNT", tc.count)
		sc, err := scaleFromEnv()
		if !tc.ok {
			assert.Error(t, err, "BENCHCOUNT=%q", tc.count)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tc.want, sc.count)
		assert.Equal(t, tc.scale == "small", sc.bigBytes < 1<<30)
	}
}

func TestAppendLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rollout.jsonl")
	lines := jsonLines(100)
	require.NoError(t, appendLines(path, lines[:40]))
	require.NoError(t, appendLines(path, lines[40:]))
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, string(bytes.Join(lines, nil)), string(got))
	for _, l := range lines {
		assert.True(t, len(l) >= 200 && len(l) <= 1000, "%d bytes", len(l))
	}
}
