package server

import (
	"bytes"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// gauge is one family of the cloud's gauges (cloudCollector): its name,
// help and label names, and the order its label values are written in —
// the label names sorted, as client_golang's encoder writes them, so a
// scrape reads as it did through the registry.
type gauge struct {
	name, help string
	labels     []string
	order      []int
	// index is the gauge's place among its collector's (its buffer's).
	index int
}

func newGauge(name, help string, labels []string) *gauge {
	order := make([]int, len(labels))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(labels[a], labels[b]) })
	return &gauge{name: name, help: help, labels: labels, order: order}
}

// sampleFunc takes one sample of gauge g: its value and its label values,
// in g.labels' order.
type sampleFunc func(g *gauge, v float64, labelValues ...string)

// metricsText writes samples in Prometheus' text exposition format
// (0.0.4, what client_golang's handler answers a scraper that does not ask
// for protobuf): each gauge's samples together in a buffer of their own,
// then the gauges in their order with their HELP and TYPE lines. A gauge
// without samples is left out, as the registry leaves it out.
type metricsText struct {
	bufs []bytes.Buffer
	num  []byte
}

// newMetricsText is an empty metricsText for gauges gauges.
func newMetricsText(gauges int) *metricsText {
	return &metricsText{bufs: make([]bytes.Buffer, gauges)}
}

// reset empties t's buffers, keeping their room.
func (t *metricsText) reset() {
	for i := range t.bufs {
		t.bufs[i].Reset()
	}
}

// add is a sampleFunc.
func (t *metricsText) add(g *gauge, v float64, labelValues ...string) {
	b := &t.bufs[g.index]
	b.WriteString(g.name)
	if len(g.order) > 0 {
		b.WriteByte('{')
		for i, j := range g.order {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(g.labels[j])
			b.WriteString(`="`)
			writeLabelValue(b, labelValues[j])
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	t.num = appendSampleValue(t.num[:0], v)
	b.Write(t.num)
	b.WriteByte('\n')
}

// writeTo writes the gauges' families, in gauges' order (their index's).
func (t *metricsText) writeTo(w io.Writer, gauges []*gauge) error {
	var head bytes.Buffer
	for _, g := range gauges {
		b := &t.bufs[g.index]
		if b.Len() == 0 {
			continue
		}
		head.Reset()
		head.WriteString("# HELP ")
		head.WriteString(g.name)
		head.WriteByte(' ')
		helpEscaper.WriteString(&head, g.help)
		head.WriteString("\n# TYPE ")
		head.WriteString(g.name)
		head.WriteString(" gauge\n")
		if _, err := w.Write(head.Bytes()); err != nil {
			return err
		}
		if _, err := w.Write(b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

var helpEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`)

// writeLabelValue writes v escaped as the text format wants a label value:
// backslash, double quote and newline.
func writeLabelValue(b *bytes.Buffer, v string) {
	if !strings.ContainsAny(v, "\\\"\n") {
		b.WriteString(v)
		return
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; c {
		case '\\':
			b.WriteString(`\\`)
		case '"':
			b.WriteString(`\"`)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteByte(c)
		}
	}
}

// appendSampleValue appends v as the text format writes it (client_golang's
// expfmt: the shortest 'g' form, NaN, +Inf, -Inf).
func appendSampleValue(b []byte, v float64) []byte {
	switch {
	case math.IsNaN(v):
		return append(b, "NaN"...)
	case math.IsInf(v, +1):
		return append(b, "+Inf"...)
	case math.IsInf(v, -1):
		return append(b, "-Inf"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
