package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Results is everything one run measured, as written to its JSON file.
type Results struct {
	Date      string `json:"date"`
	Commit    string `json:"commit"`
	Machine   string `json:"machine"`
	LoadStart string `json:"load_start"` // /proc/loadavg
	LoadEnd   string `json:"load_end"`
	Scale     string `json:"scale"`
	Count     int    `json:"count"`
	// SnapshotCount is the rounds of capture and fork (snapshotRounds).
	SnapshotCount int        `json:"snapshot_count"`
	Targets       []string   `json:"targets"` // measured, in the table's order
	Skipped       []Skip     `json:"skipped,omitempty"`
	Workloads     []Workload `json:"workloads"`
	Samples       []Sample   `json:"samples"`
	Snapshots     []Sample   `json:"snapshots"`
}

// Skip is a target left out, and why.
type Skip struct {
	Target string `json:"target"`
	Why    string `json:"why"`
}

// Workload is a row of the table.
type Workload struct {
	Key   string `json:"key"`
	Label string `json:"label"`
}

// Sample is one timed run of a workload on a target.
type Sample struct {
	Target   string  `json:"target"`
	Workload string  `json:"workload"`
	Round    int     `json:"round"`
	Seconds  float64 `json:"seconds"`
}

func (r *Results) add(target, key string, round int, d time.Duration) {
	r.Samples = append(r.Samples, Sample{target, key, round, d.Seconds()})
}

func (r *Results) addSnapshot(target, key string, round int, d time.Duration) {
	r.Snapshots = append(r.Snapshots, Sample{target, key, round, d.Seconds()})
}

// span is the fastest and the slowest of a target's samples of a
// workload; ok is false when it has none.
type span struct {
	min, max float64
	ok       bool
}

func spanOf(samples []Sample, target, key string) span {
	var s span
	for _, x := range samples {
		if x.Target != target || x.Workload != key {
			continue
		}
		if !s.ok || x.Seconds < s.min {
			s.min = x.Seconds
		}
		if !s.ok || x.Seconds > s.max {
			s.max = x.Seconds
		}
		s.ok = true
	}
	return s
}

func (s span) String() string {
	if !s.ok {
		return "—"
	}
	lo, hi := seconds(s.min), seconds(s.max)
	if lo == hi {
		return lo
	}
	return lo + "–" + hi
}

// seconds writes a time in seconds to three significant digits.
func seconds(x float64) string {
	switch {
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	case x >= 10:
		return fmt.Sprintf("%.1f", x)
	case x >= 1:
		return fmt.Sprintf("%.2f", x)
	case x >= 0.1:
		return fmt.Sprintf("%.3f", x)
	default:
		return fmt.Sprintf("%.4f", x)
	}
}

func isHomefs(target string) bool { return strings.HasPrefix(target, "homefs") }

// fusePeers are the targets homefs competes with: filesystems served
// through FUSE as it is (kernel overlayfs and ext4 are references).
var fusePeers = map[string]bool{nameFuseOvl: true}

// bestPeer is the fastest FUSE peer on a row: its name and fastest time.
func bestPeer(r *Results, key string) (string, float64, bool) {
	var name string
	var best float64
	for _, t := range r.Targets {
		if !fusePeers[t] {
			continue
		}
		if s := spanOf(r.Samples, t, key); s.ok && (name == "" || s.min < best) {
			name, best = t, s.min
		}
	}
	return name, best, name != ""
}

func ratio(num, den float64) string {
	if den <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", num/den)
}

// table writes the side-by-side table: each target's time range, then
// for each homefs target its fastest time over ext4's and over the best
// FUSE peer's.
func table(w io.Writer, r *Results) {
	homes := slices.DeleteFunc(slices.Clone(r.Targets), func(t string) bool { return !isHomefs(t) })
	head := append([]string{"workload (seconds, min–max of " + fmt.Sprint(r.Count) + ")"}, r.Targets...)
	for _, h := range homes {
		head = append(head, h+" ÷ ext4", h+" ÷ best FUSE peer")
	}
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	for _, wl := range r.Workloads {
		row := []string{strings.ReplaceAll(wl.Label, "|", `\|`)}
		for _, t := range r.Targets {
			row = append(row, spanOf(r.Samples, t, wl.Key).String())
		}
		ext4 := spanOf(r.Samples, nameExt4, wl.Key)
		peer, best, havePeer := bestPeer(r, wl.Key)
		for _, h := range homes {
			s := spanOf(r.Samples, h, wl.Key)
			vsExt4, vsPeer := "—", "—"
			if s.ok && ext4.ok {
				vsExt4 = ratio(s.min, ext4.min)
			}
			if s.ok && havePeer {
				vsPeer = ratio(s.min, best) + " (" + peer + ")"
			}
			row = append(row, vsExt4, vsPeer)
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "\n%s skipped: %s\n", s.Target, s.Why)
	}
}

// snapshotTable writes capture and fork through homefs's CLI and its
// socket beside the btrfs snapshots, in milliseconds.
func snapshotTable(w io.Writer, r *Results) {
	if len(r.Snapshots) == 0 {
		return
	}
	ms := func(s span) string {
		if !s.ok {
			return "—"
		}
		lo, hi := fmt.Sprintf("%.1f", s.min*1e3), fmt.Sprintf("%.1f", s.max*1e3)
		if lo == hi {
			return lo
		}
		return lo + "–" + hi
	}
	vs := func(a, b span) string {
		if a.ok && b.ok {
			return ratio(a.min, b.min)
		}
		return "—"
	}
	rounds := r.SnapshotCount
	if rounds == 0 {
		rounds = r.Count // results written before snapshot_count
	}
	fmt.Fprintf(w, "| call (ms, min–max of %d) | %s | %s | %s | CLI ÷ btrfs | socket ÷ btrfs |\n|---|---|---|---|---|---|\n",
		rounds, nameSnapHomefs, nameSnapAPI, nameSnapBtrfs)
	for _, key := range []string{"capture", "fork"} {
		h, a, b := spanOf(r.Snapshots, nameSnapHomefs, key), spanOf(r.Snapshots, nameSnapAPI, key), spanOf(r.Snapshots, nameSnapBtrfs, key)
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", key, ms(h), ms(a), ms(b), vs(h, b), vs(a, b))
	}
}
