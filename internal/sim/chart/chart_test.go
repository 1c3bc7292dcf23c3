package chart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// drainPanels fakes seed-hour: 12 hosts at 56 GiB; h01 and h02 drained one
// instance a minute from t=30 onto the other ten, each policy spreading
// them differently; audits at t=0 and t=3600.
func drainPanels() []Panel {
	sizes := []int64{2048, 4096, 8192}
	var panels []Panel
	for pi, policy := range []string{"legacy", "dest-update", "claim"} {
		p := Panel{Title: "policy " + policy, Marks: []float64{0, 3600}}
		for h := 1; h <= 12; h++ {
			p.Hosts = append(p.Hosts, fmt.Sprintf("h%02d", h))
			p.CapacityMB = append(p.CapacityMB, 131072-512)
		}
		used := make([]int64, 12)
		for h := range used {
			used[h] = 57344
		}
		snapshot := func(t float64) {
			p.Times = append(p.Times, t)
			p.UsedMB = append(p.UsedMB, append([]int64(nil), used...))
		}
		snapshot(0)
		for m := 0; m < 24; m++ {
			t := 30 + 60*float64(m)
			src := m / 12
			ram := sizes[m%3]
			var dst int
			switch pi {
			case 0: // legacy: piles onto the same few hosts between audits
				dst = 2 + m%3
			case 1:
				dst = 2 + m%6
			default:
				dst = 2 + m%10
			}
			used[dst] += ram // destination claim at start
			snapshot(t)
			used[src] -= ram // source freed when the copy ends
			snapshot(t + float64(ram)/1024)
		}
		snapshot(3600)
		panels = append(panels, p)
	}
	return panels
}

// bigPanel has n hosts and steps samples with random walks.
func bigPanel(title string, n, steps int, seed uint64) Panel {
	r := rand.New(rand.NewPCG(seed, 1))
	p := Panel{Title: title}
	used := make([]int64, n)
	for h := 0; h < n; h++ {
		p.Hosts = append(p.Hosts, fmt.Sprintf("cmp%05d", h+1))
		p.CapacityMB = append(p.CapacityMB, 130560)
		used[h] = 50000 + r.Int64N(20000)
	}
	for s := 0; s < steps; s++ {
		p.Times = append(p.Times, float64(s)*60)
		for h := range used {
			used[h] = min(130560, max(0, used[h]+r.Int64N(4097)-2048))
		}
		p.UsedMB = append(p.UsedMB, append([]int64(nil), used...))
		if s%60 == 0 {
			p.Marks = append(p.Marks, float64(s)*60)
		}
	}
	return p
}

// parse checks that svg is well-formed XML and returns the element counts
// and all character data.
func parse(t *testing.T, svg []byte) (map[string]int, string) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	counts := map[string]int{}
	var text strings.Builder
	depth := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			if depth == 0 && (tok.Name.Local != "svg" || tok.Name.Space != "http://www.w3.org/2000/svg") {
				t.Fatalf("root is %v", tok.Name)
			}
			depth++
			counts[tok.Name.Local]++
		case xml.EndElement:
			depth--
		case xml.CharData:
			text.Write(tok)
			text.WriteByte('\n')
		}
	}
	if depth != 0 {
		t.Fatalf("unbalanced elements")
	}
	return counts, text.String()
}

func TestWriteSVG(t *testing.T) {
	panels := drainPanels()
	panels[2].Title = `claim <exact> & "fast"` // needs escaping
	var a, b bytes.Buffer
	if err := WriteSVG(&a, panels); err != nil {
		t.Fatal(err)
	}
	if err := WriteSVG(&b, panels); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("same input, different output")
	}
	counts, text := parse(t, a.Bytes())
	if got, want := counts["polyline"], 12*3; got != want {
		t.Errorf("%d polylines, want hosts × panels = %d", got, want)
	}
	for _, s := range []string{"policy legacy", "policy dest-update", `claim <exact> & "fast"`, "h01", "h12", "RAM in use (GiB)", "time (min)", "capacity 127.5 GiB"} {
		if !strings.Contains(text, s) {
			t.Errorf("text %q missing", s)
		}
	}
	if os.Getenv("CHART_SAMPLE") != "" {
		if err := os.WriteFile(os.Getenv("CHART_SAMPLE"), a.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestManyHosts(t *testing.T) {
	panels := []Panel{bigPanel("legacy", 10000, 24*60, 1), bigPanel("claim", 10000, 24*60, 2)}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, panels); err != nil {
		t.Fatal(err)
	}
	counts, text := parse(t, buf.Bytes())
	if got, want := counts["polyline"], (1+Busiest)*2; got != want {
		t.Errorf("%d polylines, want median + %d busiest per panel = %d", got, Busiest, want)
	}
	if counts["polygon"] != 4 {
		t.Errorf("%d bands, want 2 per panel", counts["polygon"])
	}
	if !strings.Contains(text, "min–max of 10000 hosts") || !strings.Contains(text, "(busiest)") {
		t.Error("band legend missing")
	}
	if n := buf.Len(); n > 500_000 {
		t.Errorf("10,000 hosts × 24 h: %d bytes", n)
	}
	if os.Getenv("CHART_SAMPLE_BIG") != "" {
		if err := os.WriteFile(os.Getenv("CHART_SAMPLE_BIG"), buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The cut-over: MaxLines hosts still get a line each.
	p := bigPanel("edge", MaxLines, 10, 3)
	buf.Reset()
	if err := WriteSVG(&buf, []Panel{p}); err != nil {
		t.Fatal(err)
	}
	if counts, _ := parse(t, buf.Bytes()); counts["polyline"] != MaxLines {
		t.Errorf("%d hosts: %d polylines", MaxLines, counts["polyline"])
	}
}

func TestDenseSeriesStaysSmall(t *testing.T) {
	// One sample a second for a day, changing every sample.
	p := Panel{Title: "dense", Hosts: []string{"a"}, CapacityMB: []int64{1000}}
	for s := 0; s < 86400; s++ {
		p.Times = append(p.Times, float64(s))
		p.UsedMB = append(p.UsedMB, []int64{int64(500 + s%97)})
	}
	var buf bytes.Buffer
	if err := WriteSVG(&buf, []Panel{p}); err != nil {
		t.Fatal(err)
	}
	parse(t, buf.Bytes())
	if n := buf.Len(); n > 60_000 {
		t.Errorf("%d bytes for one dense series", n)
	}
}

func TestErrors(t *testing.T) {
	good := drainPanels()[0]
	tests := map[string]func(p *Panel){
		"capacities": func(p *Panel) { p.CapacityMB = p.CapacityMB[1:] },
		"rows":       func(p *Panel) { p.UsedMB = p.UsedMB[1:] },
		"row width":  func(p *Panel) { p.UsedMB[3] = p.UsedMB[3][1:] },
		"backwards":  func(p *Panel) { p.Times[2], p.Times[3] = p.Times[3], p.Times[2] },
	}
	for name, mutate := range tests {
		p := good
		p.CapacityMB = append([]int64(nil), good.CapacityMB...)
		p.Times = append([]float64(nil), good.Times...)
		p.UsedMB = append([][]int64(nil), good.UsedMB...)
		mutate(&p)
		if err := WriteSVG(io.Discard, []Panel{p}); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if err := WriteSVG(io.Discard, nil); err == nil {
		t.Error("no panels: no error")
	}
	// Empty panels still draw.
	var buf bytes.Buffer
	if err := WriteSVG(&buf, []Panel{{Title: "empty"}}); err != nil {
		t.Fatal(err)
	}
	parse(t, buf.Bytes())
}
