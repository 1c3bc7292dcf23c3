package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"keel/internal/testenv"
)

// TestQuickHarness runs keelbench --quick --json end to end — every
// section, with the real SQLite, PostgreSQL (a throw-away cluster),
// OpenStack Placement under gunicorn and Nova's scheduler code — and
// checks the JSON holds every required figure as a positive number. It
// asserts nothing about speed: quick mode shrinks every size.
func TestQuickHarness(t *testing.T) {
	testenv.External(t, "PostgreSQL, Placement 8.0 under gunicorn and Nova 26 (Debian's postgresql, python3-placement, gunicorn, python3-nova)")
	ctx := testenv.Context(t)
	var out bytes.Buffer
	if err := Main(ctx, []string{"--quick", "--json"}, &out, logWriter{t}); err != nil {
		t.Fatalf("keelbench --quick --json: %v", err)
	}
	var got map[string]any
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, out.String())
	}
	for _, k := range RequiredKeys {
		v, ok := got[k].(float64)
		if !ok || !(v > 0) {
			t.Errorf("%s = %v, want a positive number", k, got[k])
		}
	}
	if got["quick"] != true {
		t.Errorf("quick = %v, want true", got["quick"])
	}
	rows, _ := got["rows"].([]any)
	sections := map[string]bool{}
	var text strings.Builder
	for _, r := range rows {
		row, _ := r.(map[string]any)
		s, _ := row["section"].(string)
		sections[s] = true
		for _, f := range []string{"what", "result", "conditions"} {
			v, _ := row[f].(string)
			if v == "" {
				t.Errorf("row %v has no %s", row, f)
			}
			text.WriteString(v + "\n")
		}
	}
	if len(sections) != len(Sections) {
		t.Errorf("rows cover sections %v, want %d sections", sections, len(Sections))
	}
	for _, want := range []string{"one gunicorn worker", "one keel server, both on SQLite", "Nova", "PostgreSQL"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("the table never says %q", want)
		}
	}
	t.Logf("quick harness: %v s wall", got["wall_s"])
}

// TestOnlyRejectsUnknownSections checks --only's validation.
func TestOnlyRejectsUnknownSections(t *testing.T) {
	var out, errb bytes.Buffer
	err := Main(context.Background(), []string{"--only", "decision,nope"}, &out, &errb)
	if err == nil || !strings.Contains(err.Error(), `unknown section "nope"`) {
		t.Fatalf("want an unknown-section error, got %v", err)
	}
}

// logWriter sends the harness's progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
