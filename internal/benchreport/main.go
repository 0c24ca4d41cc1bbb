// Command benchreport turns the output of the fusefs mount benchmarks
// (go test -bench, any -count) into the table of docs/BENCHMARKS.md: for
// each operation, homefs ÷ native measured in the same run, beside the goal.
// Repeated results are summarised by their median. Other filesystems are
// measured side by side by internal/benchpeers.
//
// Usage: go test ./fusefs -run '^$' -bench . | go run ./internal/benchreport
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// An op is one row of the table: benchmark name (without /native or
// /homefs) and how to judge it.
type op struct {
	name   string
	label  string
	rate   bool    // compare throughput (MB/s); otherwise time per op
	goal   float64 // rate: homefs ≥ goal × native; time: homefs ≤ goal × native; 0: none
	homefs string  // the homefs sub-benchmark, when not "homefs"
}

var ops = []op{
	{"SeqWrite", "sequential write, 1 MiB blocks + fsync", true, 0.7, ""},
	{"SeqWrite", "the same, then close and capture (the bytes stored)", true, 0, "homefs+capture"},
	{"SeqRead", "sequential read, 1 MiB blocks, cold cache", true, 0, ""},
	{"SeqReadCached", "the same file read again (page cache kept)", true, 0.8, ""},
	{"SeqReadJustWritten", "a 1 GiB file read right after it was written and closed", true, 0.8, ""},
	{"RandWrite4K", "4 KiB random write + fsync", true, 0.5, ""},
	{"JSONLAppend", "JSONL append, fsync every 32 lines (O_WRONLY descriptor)", true, 0.5, ""},
	{"JSONLAppendRW", "the same through O_RDWR (Codex's rollout descriptor)", true, 0.5, ""},
	{"Tree/untar", "untar of Go's src/ (tar -xf)", false, 3, ""},
	{"Tree/untar+sync", "the same, then sync (homefs: and flush, the bytes stored)", false, 0, ""},
	{"SmallFile", "one file written as tar writes it (2 KiB)", false, 0, ""},
	{"RoundTrip", "one fchmod of an open file (homefs: one round trip)", false, 0, ""},
	{"Tree/git-status", "git status on it", false, 3, ""},
	{"Tree/rm-rf", "rm -rf of it", false, 3, ""},
}

// snapshotGoal is the bound on Engine.Capture and Engine.Fork, in ns.
const snapshotGoal = 10e6

// result holds the samples of one benchmark.
type result struct{ ns, mbs []float64 }

var (
	lineRE  = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)
	valueRE = regexp.MustCompile(`([\d.e+]+) (ns/op|MB/s)`)
)

func parse(r io.Reader) (map[string]*result, []string, error) {
	res := make(map[string]*result)
	var order []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := lineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		rs, ok := res[m[1]]
		if !ok {
			rs = &result{}
			res[m[1]] = rs
			order = append(order, m[1])
		}
		for _, v := range valueRE.FindAllStringSubmatch(m[2], -1) {
			f, err := strconv.ParseFloat(v[1], 64)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", sc.Text(), err)
			}
			if v[2] == "ns/op" {
				rs.ns = append(rs.ns, f)
			} else {
				rs.mbs = append(rs.mbs, f)
			}
		}
	}
	return res, order, sc.Err()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

func duration(ns float64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2f s", ns/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.1f ms", ns/1e6)
	case ns >= 1e4:
		return fmt.Sprintf("%.0f µs", ns/1e3)
	default:
		return fmt.Sprintf("%.2f µs", ns/1e3)
	}
}

func report(w io.Writer, res map[string]*result, order []string) {
	fmt.Fprintln(w, "| operation | native | homefs | homefs ÷ native | goal | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, o := range ops {
		sub := o.homefs
		if sub == "" {
			sub = "homefs"
		}
		nat, hfs := res[o.name+"/native"], res[o.name+"/"+sub]
		if nat == nil || hfs == nil {
			continue
		}
		var natS, hfsS, ratioS, goalS, met string
		if o.rate {
			n, h := median(nat.mbs), median(hfs.mbs)
			ratio := h / n
			natS, hfsS = fmt.Sprintf("%.0f MB/s", n), fmt.Sprintf("%.0f MB/s", h)
			ratioS = fmt.Sprintf("%.2f× throughput", ratio)
			if o.goal > 0 {
				goalS, met = fmt.Sprintf("≥ %.1f×", o.goal), yes(ratio >= o.goal)
			}
		} else {
			n, h := median(nat.ns), median(hfs.ns)
			ratio := h / n
			natS, hfsS = duration(n), duration(h)
			ratioS = fmt.Sprintf("%.2f× time", ratio)
			if o.goal > 0 {
				goalS, met = fmt.Sprintf("≤ %.0f× time", o.goal), yes(ratio <= o.goal)
			}
		}
		if goalS == "" {
			goalS, met = "—", "—"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", o.label, natS, hfsS, ratioS, goalS, met)
	}

	// Snapshot/<size>/<capture|fork>: absolute time, flat across sizes.
	byKind := map[string][]float64{}
	var rows []string
	slices.SortStableFunc(order, func(a, b string) int {
		return strings.Compare(a[strings.LastIndex(a, "/")+1:], b[strings.LastIndex(b, "/")+1:])
	})
	for _, name := range order {
		parts := strings.Split(name, "/")
		if len(parts) != 3 || parts[0] != "Snapshot" {
			continue
		}
		ns := median(res[name].ns)
		byKind[parts[2]] = append(byKind[parts[2]], ns)
		rows = append(rows, fmt.Sprintf("| %s | %s | %s | < 10 ms | %s |", parts[2], strings.TrimPrefix(parts[1], "rollout="), duration(ns), yes(ns < snapshotGoal)))
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| engine call | rollout (+ source tree) | time | goal | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintln(w, r)
	}
	fmt.Fprintln(w)
	for _, kind := range []string{"capture", "fork"} {
		if xs := byKind[kind]; len(xs) > 1 {
			fmt.Fprintf(w, "%s: largest ÷ smallest across sizes = %.1f (flat means close to 1)\n", kind, slices.Max(xs)/slices.Min(xs))
		}
	}
}

func yes(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}

func main() {
	res, order, err := parse(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
	if len(res) == 0 {
		fmt.Fprintln(os.Stderr, "benchreport: no benchmark results on stdin")
		os.Exit(1)
	}
	report(os.Stdout, res, order)
}
