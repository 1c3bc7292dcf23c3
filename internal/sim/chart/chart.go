// Package chart draws the simulator's RAM-use charts as SVG: one panel per
// policy, stacked vertically, each a step chart of every host's RAM in use
// (allocations) over time. Output is deterministic (same input, same bytes)
// and uses only the standard library.
//
// With more than MaxLines hosts a panel does not draw every host: it draws
// the min–max band and the median over all hosts, plus the Busiest hosts
// (highest peak RAM use relative to capacity) as lines, so a 10,000-host
// chart stays small.
package chart

import (
	"bufio"
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Panel is one chart: the hosts' RAM use over time under one policy.
type Panel struct {
	Title      string
	Hosts      []string
	CapacityMB []int64   // per host, same order as Hosts
	Times      []float64 // seconds, non-decreasing
	// UsedMB[t][h] is host h's RAM in use (allocations) at Times[t].
	UsedMB [][]int64
	// Marks are times of audits or other vertical markers; may be empty.
	Marks []float64
}

// MaxLines is the most hosts a panel draws one line each for; above it, a
// panel draws the min–max band, the median and the Busiest hosts.
const MaxLines = 40

// Busiest is how many individual hosts a banded panel draws.
const Busiest = 3

// Geometry, in SVG user units (px).
const (
	marginLeft   = 64  // y tick labels and axis title
	plotWidth    = 720 // plot area
	legendGap    = 20
	marginRight  = 12
	panelTitleH  = 30 // above the plot
	plotHeight   = 220
	axisBelowH   = 46 // x tick labels and axis title
	panelGap     = 10
	legendRowH   = 16
	legendSwatch = 22
	charWidth    = 6.6 // average glyph width at font-size 11, for legend layout
	maxLegendLen = 28  // legend names are cut to this many characters
	denseMarks   = 60  // more marks than this are drawn as a rug, not lines
)

// palette is Tableau 10; hosts beyond the tenth reuse it with dashes.
var palette = []string{
	"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
	"#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
}

// bandColors fill the min–max and percentile bands.
var bandColors = []string{"#d3e3f1", "#9ec3e2"}

var dashes = []string{"", "6 3", "2 2", "8 3 2 3"}

// style returns the stroke colour and dash pattern of the i-th line.
func style(i int) (color, dash string) {
	return palette[i%len(palette)], dashes[(i/len(palette))%len(dashes)]
}

// WriteSVG draws panels, stacked vertically in order, to w.
func WriteSVG(w io.Writer, panels []Panel) error {
	if len(panels) == 0 {
		return errors.New("chart: no panels")
	}
	for i := range panels {
		if err := panels[i].check(); err != nil {
			return fmt.Errorf("chart: panel %d (%q): %w", i, panels[i].Title, err)
		}
	}

	// Shared scales, so panels compare at a glance.
	var tMax float64
	var yMaxMB int64
	for _, p := range panels {
		if n := len(p.Times); n > 0 {
			tMax = math.Max(tMax, p.Times[n-1])
		}
		for _, c := range p.CapacityMB {
			yMaxMB = max(yMaxMB, c)
		}
		for _, row := range p.UsedMB {
			for _, u := range row {
				yMaxMB = max(yMaxMB, u)
			}
		}
	}
	if tMax <= 0 {
		tMax = 60
	}
	if yMaxMB <= 0 {
		yMaxMB = 1024
	}

	// Every panel's lines, and one legend width for all, so the plots align.
	// A host keeps its colour across panels (first-seen order over all).
	hostIndex := map[string]int{}
	for _, p := range panels {
		for _, h := range p.Hosts {
			if _, ok := hostIndex[h]; !ok {
				hostIndex[h] = len(hostIndex)
			}
		}
	}
	plans := make([]panelPlan, len(panels))
	legendW := 0.0
	for i := range panels {
		plans[i] = plan(&panels[i], hostIndex)
		legendW = math.Max(legendW, plans[i].legendWidth())
	}

	width := marginLeft + plotWidth + legendGap + int(math.Ceil(legendW)) + marginRight
	panelH := panelTitleH + plotHeight + axisBelowH
	height := len(panels)*panelH + (len(panels)-1)*panelGap

	var buf bytes.Buffer
	b := bufio.NewWriter(&buf)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	titles := make([]string, len(panels))
	for i, p := range panels {
		titles[i] = p.Title
	}
	fmt.Fprintf(b, "<title>%s</title>\n", esc("RAM in use per host: "+strings.Join(titles, ", ")))
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)

	// The y axis ends at the first tick above the largest capacity (or use)
	// plus a little headroom, so the capacity line stands clear of the frame.
	yStep := niceStep(float64(yMaxMB)/1024, 6)
	yTop := math.Ceil(float64(yMaxMB)*1.03/1024/yStep) * yStep * 1024
	sx := scale{0, tMax, 0, plotWidth}
	sy := scale{0, yTop, plotHeight, 0}
	for i := range panels {
		y0 := i * (panelH + panelGap)
		fmt.Fprintf(b, `<g transform="translate(0,%d)">`+"\n", y0)
		drawPanel(b, i, &panels[i], &plans[i], sx, sy, yStep)
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	if err := b.Flush(); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func (p *Panel) check() error {
	if len(p.CapacityMB) != len(p.Hosts) {
		return fmt.Errorf("%d capacities for %d hosts", len(p.CapacityMB), len(p.Hosts))
	}
	if len(p.UsedMB) != len(p.Times) {
		return fmt.Errorf("%d rows of use for %d times", len(p.UsedMB), len(p.Times))
	}
	for t, row := range p.UsedMB {
		if len(row) != len(p.Hosts) {
			return fmt.Errorf("row %d has %d values for %d hosts", t, len(row), len(p.Hosts))
		}
	}
	for t, x := range p.Times {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return fmt.Errorf("time %d is %v", t, x)
		}
		if t > 0 && x < p.Times[t-1] {
			return fmt.Errorf("times go backwards at %d (%v after %v)", t, x, p.Times[t-1])
		}
	}
	return nil
}

// scale maps [d0, d1] to [r0, r1].
type scale struct{ d0, d1, r0, r1 float64 }

func (s scale) at(v float64) float64 {
	if s.d1 == s.d0 {
		return s.r0
	}
	return s.r0 + (v-s.d0)/(s.d1-s.d0)*(s.r1-s.r0)
}

// series is one line: a value per time index.
type series struct {
	label       string
	color, dash string
	width       float64
	values      []int64
}

// panelPlan is what a panel draws: its lines, an optional band, and the
// legend entries.
type panelPlan struct {
	lines  []series
	bands  [][2][]int64 // lower and upper edges per time index, drawn in order
	legend []legendEntry
}

type legendEntry struct {
	label       string
	color, dash string
	fill        bool // a band swatch rather than a line
}

func plan(p *Panel, hostIndex map[string]int) panelPlan {
	var pl panelPlan
	n := len(p.Hosts)
	column := func(h int) []int64 {
		v := make([]int64, len(p.Times))
		for t := range p.Times {
			v[t] = p.UsedMB[t][h]
		}
		return v
	}
	if n <= MaxLines {
		for h, name := range p.Hosts {
			color, dash := style(hostIndex[name])
			pl.lines = append(pl.lines, series{label: name, color: color, dash: dash, width: 1.5, values: column(h)})
			pl.legend = append(pl.legend, legendEntry{label: name, color: color, dash: dash})
		}
		return pl
	}

	// Band: min, median, max across hosts at each time.
	// Band: min–max and 10th–90th percentile across hosts at each time,
	// and the median.
	T := len(p.Times)
	lo, p10, med, p90, hi := make([]int64, T), make([]int64, T), make([]int64, T), make([]int64, T), make([]int64, T)
	row := make([]int64, n)
	i10, i90 := (n-1)/10, (9*(n-1)+9)/10
	for t := range p.Times {
		copy(row, p.UsedMB[t])
		slices.Sort(row)
		lo[t], p10[t], p90[t], hi[t] = row[0], row[i10], row[i90], row[n-1]
		if n%2 == 1 {
			med[t] = row[n/2]
		} else {
			med[t] = (row[n/2-1] + row[n/2]) / 2
		}
	}
	pl.bands = [][2][]int64{{lo, hi}, {p10, p90}}
	pl.legend = append(pl.legend,
		legendEntry{label: fmt.Sprintf("min–max of %d hosts", n), color: bandColors[0], fill: true},
		legendEntry{label: "10th–90th percentile", color: bandColors[1], fill: true},
		legendEntry{label: "median", color: "#1f4e79"})
	pl.lines = append(pl.lines, series{label: "median", color: "#1f4e79", width: 1.5, values: med})

	// Busiest hosts: highest peak use ÷ capacity, then highest mean use,
	// then name.
	type busy struct {
		h          int
		peak, mean float64
	}
	all := make([]busy, n)
	for h := range p.Hosts {
		var peak int64
		var sum float64
		for t := range p.Times {
			u := p.UsedMB[t][h]
			peak = max(peak, u)
			sum += float64(u)
		}
		c := float64(p.CapacityMB[h])
		if c <= 0 {
			c = 1
		}
		all[h] = busy{h: h, peak: float64(peak) / c, mean: sum / c}
	}
	slices.SortFunc(all, func(a, b busy) int {
		switch {
		case a.peak != b.peak:
			return cmpDesc(a.peak, b.peak)
		case a.mean != b.mean:
			return cmpDesc(a.mean, b.mean)
		}
		return strings.Compare(p.Hosts[a.h], p.Hosts[b.h])
	})
	busyColors := []string{"#e15759", "#f28e2b", "#59a14f"}
	for i := 0; i < Busiest && i < n; i++ {
		h := all[i].h
		color := busyColors[i%len(busyColors)]
		name := p.Hosts[h]
		if i == 0 {
			name += " (busiest)"
		}
		pl.lines = append(pl.lines, series{label: p.Hosts[h], color: color, width: 1.25, values: column(h)})
		pl.legend = append(pl.legend, legendEntry{label: name, color: color})
	}
	return pl
}

func cmpDesc(a, b float64) int {
	if a > b {
		return -1
	}
	return 1
}

// legendLayout returns rows per column, columns and column width.
func (pl *panelPlan) legendLayout() (rows, cols int, colW float64) {
	n := len(pl.legend)
	if n == 0 {
		return 0, 0, 0
	}
	maxRows := max(1, (plotHeight-4)/legendRowH)
	cols = (n + maxRows - 1) / maxRows
	rows = (n + cols - 1) / cols
	longest := 0
	for _, e := range pl.legend {
		longest = max(longest, len([]rune(shorten(e.label))))
	}
	colW = legendSwatch + 6 + float64(longest)*charWidth + 14
	return rows, cols, colW
}

func (pl *panelPlan) legendWidth() float64 {
	_, cols, colW := pl.legendLayout()
	return float64(cols) * colW
}

func shorten(s string) string {
	r := []rune(s)
	if len(r) <= maxLegendLen {
		return s
	}
	return string(r[:maxLegendLen-1]) + "…"
}

func drawPanel(b *bufio.Writer, idx int, p *Panel, pl *panelPlan, sx, sy scale, yStep float64) {
	left, top := float64(marginLeft), float64(panelTitleH)
	clip := fmt.Sprintf("plot%d", idx)

	// Title.
	fmt.Fprintf(b, `<text x="%s" y="20" font-size="14" font-weight="bold" fill="#222">%s</text>`+"\n", num(left), esc(p.Title))

	fmt.Fprintf(b, `<defs><clipPath id="%s"><rect x="0" y="-2" width="%d" height="%d"/></clipPath></defs>`+"\n", clip, plotWidth, plotHeight+4)
	fmt.Fprintf(b, `<g transform="translate(%s,%s)">`+"\n", num(left), num(top))

	// Y grid and ticks, in GiB.
	yMaxGiB := sy.d1 / 1024
	yTicks := ticks(yMaxGiB, yStep)
	b.WriteString(`<g stroke="#e4e4e4" stroke-width="1">` + "\n")
	for _, v := range yTicks {
		y := sy.at(v * 1024)
		fmt.Fprintf(b, `<line x1="0" y1="%s" x2="%d" y2="%s"/>`+"\n", num(y), plotWidth, num(y))
	}
	b.WriteString("</g>\n")
	b.WriteString(`<g fill="#444" text-anchor="end">` + "\n")
	for _, v := range yTicks {
		fmt.Fprintf(b, `<text x="-6" y="%s">%s</text>`+"\n", num(sy.at(v*1024)+4), label(v))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<text transform="translate(-44,%d) rotate(-90)" text-anchor="middle" fill="#444">RAM in use (GiB)</text>`+"\n", plotHeight/2)

	// X ticks, in minutes.
	tMaxMin := sx.d1 / 60
	xstep := niceMinutes(tMaxMin, 8)
	b.WriteString(`<g fill="#444" text-anchor="middle">` + "\n")
	for _, v := range ticks(tMaxMin, xstep) {
		x := sx.at(v * 60)
		fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d" stroke="#888"/>`, num(x), plotHeight, num(x), plotHeight+4)
		fmt.Fprintf(b, `<text x="%s" y="%d">%s</text>`+"\n", num(x), plotHeight+16, label(v))
	}
	b.WriteString("</g>\n")
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle" fill="#444">time (min)</text>`+"\n", plotWidth/2, plotHeight+34)

	// Capacity: a dashed line per distinct capacity (at most four).
	caps := slices.Clone(p.CapacityMB)
	slices.Sort(caps)
	caps = slices.Compact(caps)
	if len(caps) <= 4 {
		for _, c := range caps {
			if c <= 0 {
				continue
			}
			y := sy.at(float64(c))
			fmt.Fprintf(b, `<line x1="0" y1="%s" x2="%d" y2="%s" stroke="#777" stroke-width="1" stroke-dasharray="4 3"/>`, num(y), plotWidth, num(y))
			fmt.Fprintf(b, `<text x="%d" y="%s" text-anchor="end" fill="#777" font-size="10">capacity %s GiB</text>`+"\n", plotWidth-4, num(y-3), label(float64(c)/1024))
		}
	}

	// Marks: dashed lines, or a rug along the x axis when dense.
	xs := markColumns(p.Marks, sx)
	if len(xs) > 0 {
		if len(xs) <= denseMarks {
			b.WriteString(`<g stroke="#9a9a9a" stroke-width="1" stroke-dasharray="2 3">` + "\n")
			for _, x := range xs {
				fmt.Fprintf(b, `<line x1="%s" y1="0" x2="%s" y2="%d"/>`+"\n", num(x), num(x), plotHeight)
			}
			b.WriteString("</g>\n")
			// A small triangle above the frame, so marks on its edges show.
			b.WriteString(`<g fill="#9a9a9a">` + "\n")
			for _, x := range xs {
				fmt.Fprintf(b, `<path d="M%s,-6h8l-4,6z"/>`+"\n", num(x-4))
			}
		} else {
			b.WriteString(`<g stroke="#9a9a9a" stroke-width="1">` + "\n")
			for _, x := range xs {
				fmt.Fprintf(b, `<line x1="%s" y1="%d" x2="%s" y2="%d"/>`+"\n", num(x), plotHeight-6, num(x), plotHeight)
			}
		}
		b.WriteString("</g>\n")
	}

	// Data, clipped to the plot.
	fmt.Fprintf(b, `<g clip-path="url(#%s)">`+"\n", clip)
	for i, band := range pl.bands {
		upper := stepPoints(p.Times, band[1], sx, sy)
		lower := stepPoints(p.Times, band[0], sx, sy)
		slices.Reverse(lower)
		fmt.Fprintf(b, `<polygon fill="%s" stroke="none" points="%s"/>`+"\n", bandColors[i%len(bandColors)], points(append(upper, lower...)))
	}
	for _, s := range pl.lines {
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round"`, s.color, num(s.width))
		if s.dash != "" {
			fmt.Fprintf(b, ` stroke-dasharray="%s"`, s.dash)
		}
		fmt.Fprintf(b, ` points="%s"><title>%s</title></polyline>`+"\n", points(stepPoints(p.Times, s.values, sx, sy)), esc(s.label))
	}
	b.WriteString("</g>\n")

	// Frame.
	fmt.Fprintf(b, `<rect x="0" y="0" width="%d" height="%d" fill="none" stroke="#888"/>`+"\n", plotWidth, plotHeight)

	// Legend, right of the plot, in columns.
	rows, _, colW := pl.legendLayout()
	lx := float64(plotWidth + legendGap)
	for i, e := range pl.legend {
		x := lx + float64(i/rows)*colW
		y := float64(i%rows)*legendRowH + 10
		if e.fill {
			fmt.Fprintf(b, `<rect x="%s" y="%s" width="%d" height="10" fill="%s"/>`, num(x), num(y-5), legendSwatch, e.color)
		} else {
			fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"`, num(x), num(y), num(x+legendSwatch), num(y), e.color)
			if e.dash != "" {
				fmt.Fprintf(b, ` stroke-dasharray="%s"`, e.dash)
			}
			b.WriteString("/>")
		}
		fmt.Fprintf(b, `<text x="%s" y="%s" fill="#222">%s</text>`+"\n", num(x+legendSwatch+6), num(y+4), esc(shorten(e.label)))
	}
	b.WriteString("</g>\n")
}

// markColumns maps marks to distinct x positions (to a tenth of a pixel)
// inside the plot, sorted.
func markColumns(marks []float64, sx scale) []float64 {
	var xs []float64
	for _, m := range marks {
		if math.IsNaN(m) || m < sx.d0 || m > sx.d1 {
			continue
		}
		xs = append(xs, math.Round(sx.at(m)*10)/10)
	}
	slices.Sort(xs)
	return slices.Compact(xs)
}

type pt struct{ x, y float64 }

// stepPoints draws values as a step function (a value holds until the next
// sample), with vertices rounded to a tenth of a pixel and, within each
// pixel column, reduced to first, lowest, highest and last, so a series
// costs at most a few vertices per pixel however many samples it has.
func stepPoints(times []float64, values []int64, sx, sy scale) []pt {
	if len(times) == 0 {
		return nil
	}
	var raw []pt
	add := func(t float64, v int64) {
		raw = append(raw, pt{math.Round(sx.at(t)*10) / 10, math.Round(sy.at(float64(v))*10) / 10})
	}
	add(times[0], values[0])
	for i := 1; i < len(times); i++ {
		if values[i] != values[i-1] {
			add(times[i], values[i-1])
			add(times[i], values[i])
		}
	}
	if last := len(times) - 1; last > 0 {
		add(times[last], values[last])
	}

	// Column reduction.
	out := make([]pt, 0, len(raw))
	for i := 0; i < len(raw); {
		col := math.Floor(raw[i].x)
		j := i
		for j < len(raw) && math.Floor(raw[j].x) == col {
			j++
		}
		group := raw[i:j]
		if len(group) <= 4 {
			out = append(out, group...)
		} else {
			first, last := group[0], group[len(group)-1]
			lo, hi := first, first
			for _, q := range group {
				if q.y < lo.y {
					lo = q
				}
				if q.y > hi.y {
					hi = q
				}
			}
			out = append(out, first, pt{first.x, lo.y}, pt{first.x, hi.y}, pt{last.x, last.y})
		}
		i = j
	}
	// Drop exact repeats and middle points of straight horizontal or
	// vertical runs.
	pts := out[:0]
	for _, q := range out {
		n := len(pts)
		if n > 0 && pts[n-1] == q {
			continue
		}
		if n >= 2 && (pts[n-2].y == pts[n-1].y && pts[n-1].y == q.y || pts[n-2].x == pts[n-1].x && pts[n-1].x == q.x && between(pts[n-1].y, pts[n-2].y, q.y)) {
			pts[n-1] = q
			continue
		}
		pts = append(pts, q)
	}
	return pts
}

func between(v, a, b float64) bool { return v >= min(a, b) && v <= max(a, b) }

func points(ps []pt) string {
	var sb strings.Builder
	sb.Grow(len(ps) * 12)
	for i, q := range ps {
		if i > 0 {
			sb.WriteByte(' ')
		}
		sb.WriteString(num(q.x))
		sb.WriteByte(',')
		sb.WriteString(num(q.y))
	}
	return sb.String()
}

// num formats a coordinate with at most one decimal.
func num(v float64) string {
	v = math.Round(v*10) / 10
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// label formats a tick value.
func label(v float64) string {
	v = math.Round(v*100) / 100
	if v == 0 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// ticks returns 0, step, 2·step, … up to span.
func ticks(span, step float64) []float64 {
	var out []float64
	for k := 0; float64(k)*step <= span*(1+1e-9); k++ {
		out = append(out, float64(k)*step)
	}
	return out
}

// niceStep returns a 1-2-5 step giving about n ticks over [0, span].
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

// niceMinutes returns a step in minutes that reads as clock time (1, 2, 5,
// 10, 15, 30 minutes, 1, 2, 3, 4, 6, 12, 24 hours…) giving at most about n
// ticks over [0, span].
func niceMinutes(span float64, n int) float64 {
	raw := span / float64(n)
	for _, m := range []float64{0.25, 0.5, 1, 2, 5, 10, 15, 20, 30, 60, 120, 180, 240, 360, 720, 1440} {
		if m >= raw {
			return m
		}
	}
	return niceStep(span, n)
}

func esc(s string) string {
	var sb strings.Builder
	_ = xml.EscapeText(&sb, []byte(s))
	return sb.String()
}
