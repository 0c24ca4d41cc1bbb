package main

import (
	"fmt"
	"image/color"
	"io"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// chartTicks are the ratios the chart's axis marks.
var chartTicks = []float64{0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100}

// chart draws each target's fastest time over ext4's, per workload, as
// grouped bars on a logarithmic axis: a bar above the line is slower than
// ext4, one below faster. It writes SVG.
func chart(w io.Writer, r *Results) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("time ÷ ext4's, fastest of %d (lower is better)", r.Count)
	p.Y.Label.Text = "time ÷ ext4's (log scale; ext4 = 1×)"
	var others []string
	for _, t := range r.Targets {
		if t != nameExt4 {
			others = append(others, t)
		}
	}
	width := vg.Points(60 / float64(max(len(others), 1)))
	lo, hi := 0.0, 0.0
	for i, t := range others {
		vals := make(plotter.Values, len(r.Workloads))
		for j, wl := range r.Workloads {
			s, base := spanOf(r.Samples, t, wl.Key), spanOf(r.Samples, nameExt4, wl.Key)
			if s.ok && base.ok && base.min > 0 && s.min > 0 {
				vals[j] = math.Log10(s.min / base.min)
			}
			lo, hi = min(lo, vals[j]), max(hi, vals[j])
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("chart: %w", err)
		}
		bars.LineStyle.Width = vg.Length(0)
		bars.Color = plotutil.Color(i)
		bars.Offset = vg.Length(float64(i)-float64(len(others)-1)/2) * width
		p.Add(bars)
		p.Legend.Add(t, bars)
	}
	line, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 0}, {X: float64(len(r.Workloads)) - 0.5, Y: 0}})
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	line.Color = color.Black
	p.Add(line)
	grid := plotter.NewGrid()
	grid.Vertical.Color = nil
	p.Add(grid)
	// Room above the tallest bar for the legend.
	p.Y.Min, p.Y.Max = lo-0.1, hi+0.1+0.08*float64(len(others))
	p.Y.Tick.Marker = logTicks(p.Y.Min, p.Y.Max)
	names := make([]string, len(r.Workloads))
	for i, wl := range r.Workloads {
		names[i] = wl.Key
	}
	p.NominalX(names...)
	p.Legend.Top = true
	wt, err := p.WriterTo(11*vg.Inch, 5*vg.Inch, "svg")
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	if _, err := wt.WriteTo(w); err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	return nil
}

// logTicks labels the log10 axis with ratios.
func logTicks(lo, hi float64) plot.ConstantTicks {
	var ticks []plot.Tick
	for _, t := range chartTicks {
		if v := math.Log10(t); v >= lo && v <= hi {
			ticks = append(ticks, plot.Tick{Value: v, Label: fmt.Sprintf("%g×", t)})
		}
	}
	return ticks
}
