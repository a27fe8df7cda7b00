package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	_ "gonum.org/v1/plot/vg/vgimg" // png
	_ "gonum.org/v1/plot/vg/vgsvg" // svg

	"github.com/nakcast/nakcast/bench"
)

// plotDecades is how far the latency distribution's x axis goes: up to
// the 1 - 10^-plotDecades quantile (99.999%).
const plotDecades = 5

// writePlot draws, for every nakcast row, the latency distribution
// (percentile against latency, HDR style) and the slowest receiver's
// throughput over time, one above the other, to name (.png or .svg).
// members[k] are the member results of the k-th nakcast row.
func writePlot(name string, rows []bench.Row, members [][]bench.MemberResult) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(name)), ".")
	if format != "png" && format != "svg" {
		return usagef("-plot %q: want a .png or .svg file", name)
	}
	lat := plot.New()
	lat.Title.Text = "nakcast latency distribution (send to delivery, all receivers)"
	lat.X.Label.Text = "percentile"
	lat.Y.Label.Text = "latency (ms, log scale)"
	lat.Y.Scale = plot.LogScale{}
	lat.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	lat.X.Min, lat.X.Max = 0, plotDecades
	lat.X.Tick.Marker = percentileTicks{}
	// Bottom right: the curves rise to the top right.
	lat.Legend.Top, lat.Legend.Left = false, false
	lat.Add(plotter.NewGrid())

	thr := plot.New()
	thr.Title.Text = "nakcast throughput over time (slowest receiver)"
	thr.X.Label.Text = "seconds since the first send"
	thr.Y.Label.Text = "messages/s"
	thr.X.Min, thr.Y.Min = 0, 0
	thr.Y.Tick.Marker = rateTicks{}
	thr.Legend.Top = true // above the curves: Y.Max leaves room
	thr.Add(plotter.NewGrid())

	k, drawn, peak := 0, 0, 0.0
	for _, r := range rows {
		if r.Name != "nakcast" {
			continue
		}
		var ms []bench.MemberResult
		if k < len(members) {
			ms = members[k]
		}
		k++
		label := fmt.Sprintf("%s %s %s", bench.FormatBytes(r.MsgSize), r.Case, r.Path)
		style := plotutil.Color(drawn)
		dashes := plotutil.Dashes(drawn / 7)
		if pts := latencyPoints(r.Latency); len(pts) > 0 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width, l.Dashes = style, vg.Points(1.5), dashes
			lat.Add(l)
			lat.Legend.Add(label, l)
		}
		if pts := throughputPoints(ms); len(pts) > 0 {
			l, err := plotter.NewLine(pts)
			if err != nil {
				return err
			}
			l.Color, l.Width, l.Dashes = style, vg.Points(1.5), dashes
			for _, p := range pts {
				peak = max(peak, p.Y)
			}
			thr.Add(l)
			thr.Legend.Add(label, l)
		}
		drawn++
	}
	if drawn == 0 {
		return fmt.Errorf("-plot %s: no nakcast run to plot", name)
	}
	if peak > 0 {
		thr.Y.Max = peak * (1.15 + 0.07*float64(drawn)) // room for the legend
	}
	const w, h = 22 * vg.Centimeter, 26 * vg.Centimeter
	c, err := draw.NewFormattedCanvas(w, h, format)
	if err != nil {
		return err
	}
	// A white background: PNGs are otherwise transparent, unreadable in a
	// dark viewer.
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadX: vg.Centimeter / 2, PadY: vg.Centimeter / 2, PadTop: vg.Centimeter / 4, PadBottom: vg.Centimeter / 4, PadLeft: vg.Centimeter / 4, PadRight: vg.Centimeter / 2}
	plots := [][]*plot.Plot{{lat}, {thr}}
	canvases := plot.Align(plots, tiles, dc)
	lat.Draw(canvases[0][0])
	thr.Draw(canvases[1][0])
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", name, err)
	}
	return f.Close()
}

// latencyPoints are (x, ms) with x = -log10(1 - q): 0 at the median's
// left end, 1 at 90%, 2 at 99%... read from the row's HDR histogram.
func latencyPoints(l bench.Latency) plotter.XYs {
	hist := l.Histogram()
	if hist == nil || hist.TotalCount() == 0 {
		return nil
	}
	var pts plotter.XYs
	const steps = 40 // per decade
	for i := 0; i <= plotDecades*steps; i++ {
		x := float64(i) / steps
		q := 100 * (1 - math.Pow(10, -x))
		v := float64(hist.ValueAtQuantile(q)) / 1e6
		if v <= 0 {
			v = 1e-3
		}
		pts = append(pts, plotter.XY{X: x, Y: v})
	}
	return pts
}

// throughputPoints is the slowest receiver's delivered rate between
// timeline samples, x in seconds since the first send of the run.
func throughputPoints(ms []bench.MemberResult) plotter.XYs {
	var start int64
	for _, m := range ms {
		if m.Role == "send" && m.SendStartNs > 0 && (start == 0 || m.SendStartNs < start) {
			start = m.SendStartNs
		}
	}
	if start == 0 {
		return nil
	}
	var slowest *bench.MemberResult
	var least int64 = -1
	for i := range ms {
		m := &ms[i]
		if m.Role == "send" || len(m.Timeline) < 2 {
			continue
		}
		if n := m.Timeline[len(m.Timeline)-1].Delivered; least < 0 || n < least {
			slowest, least = m, n
		}
	}
	if slowest == nil {
		// Every member sends: use the first with a timeline.
		for i := range ms {
			if len(ms[i].Timeline) >= 2 {
				slowest = &ms[i]
				break
			}
		}
	}
	if slowest == nil {
		return nil
	}
	// Rates between samples at least half an interval apart: the last
	// sample, taken when the run ends, may follow the one before closely,
	// and the counts move in steps.
	var pts plotter.XYs
	tl := slowest.Timeline
	prev := tl[0]
	for _, s := range tl[1:] {
		dt := float64(s.Ns-prev.Ns) / 1e9
		if dt < bench.TimelineInterval.Seconds()/2 {
			continue
		}
		if s.Ns > start {
			pts = append(pts, plotter.XY{X: float64(s.Ns-start) / 1e9, Y: float64(s.Delivered-prev.Delivered) / dt})
		}
		prev = s
	}
	return pts
}

// percentileTicks label x = -log10(1-q) as percentiles.
type percentileTicks struct{}

func (percentileTicks) Ticks(lo, hi float64) []plot.Tick {
	labels := []string{"0%", "90%", "99%", "99.9%", "99.99%", "99.999%", "99.9999%"}
	var t []plot.Tick
	for d := 0; d < len(labels); d++ {
		if x := float64(d); x >= lo && x <= hi {
			t = append(t, plot.Tick{Value: x, Label: labels[d]})
		}
	}
	return t
}

// rateTicks are plot.DefaultTicks labelled with k/M suffixes.
type rateTicks struct{}

func (rateTicks) Ticks(lo, hi float64) []plot.Tick {
	t := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range t {
		if t[i].Label != "" {
			t[i].Label = bench.FormatRate(t[i].Value)
		}
	}
	return t
}
