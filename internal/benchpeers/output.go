package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// describe records when, where and at which commit the run happens.
func describe(ctx context.Context, r *Results) {
	r.Date = time.Now().UTC().Format("2006-01-02 15:04 UTC")
	if c, err := output(ctx, "", nil, "git", "describe", "--always", "--dirty"); err == nil {
		r.Commit = strings.TrimSpace(c)
	}
	kernel, _ := output(ctx, "", nil, "uname", "-r")
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if name, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(name), ":"))
				break
			}
		}
	}
	r.Machine = fmt.Sprintf("%d cores (%s), kernel %s, %s", runtime.NumCPU(), cpu, strings.TrimSpace(kernel), runtime.Version())
	r.LoadStart = loadavg()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// report prints the tables and writes peers.json, peers.md and peers.svg
// to dir.
func (r *rig) report(dir string) error {
	var md bytes.Buffer
	fmt.Fprintf(&md, "%s, commit %s, %s; load average %s at the start, %s at the end; %s scale.\n\n",
		r.res.Date, r.res.Commit, r.res.Machine, r.res.LoadStart, r.res.LoadEnd, r.res.Scale)
	table(&md, r.res)
	md.WriteString("\n")
	snapshotTable(&md, r.res)
	os.Stdout.Write(md.Bytes())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("output: %w", err)
	}
	js, err := json.MarshalIndent(r.res, "", "  ")
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	var svg bytes.Buffer
	if err := chart(&svg, r.res); err != nil {
		return err
	}
	err = errors.Join(
		os.WriteFile(filepath.Join(dir, "peers.json"), append(js, '\n'), 0o644),
		os.WriteFile(filepath.Join(dir, "peers.md"), md.Bytes(), 0o644),
		os.WriteFile(filepath.Join(dir, "peers.svg"), svg.Bytes(), 0o644),
	)
	if err != nil {
		return fmt.Errorf("output: %w", err)
	}
	fmt.Fprintf(os.Stderr, "benchpeers: wrote %s/peers.{json,md,svg}\n", dir)
	return nil
}
