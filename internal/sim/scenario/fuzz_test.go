package scenario

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse: any file is either a scenario that passes its own checks or
// refused with *Error naming a line inside the file (or none) — never a
// panic, never another error type.
func FuzzParse(f *testing.F) {
	seed, err := os.ReadFile("../../../scenarios/seed-hour.toml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("name = 1\n"))
	f.Add([]byte("[[hosts]]\ncount = -1\n"))
	f.Add([]byte("[scheduler]\nhost_subset_size = 0\n[[hosts]]\ncount = 1e9\n"))
	f.Add([]byte("duration = \"-1h\"\n[[flavors]]\nname = \"x\"\n"))
	f.Add([]byte("\x00\xff[[["))
	f.Fuzz(func(t *testing.T, data []byte) {
		sc, err := Parse("f.toml", data)
		if err == nil {
			if sc == nil {
				t.Fatal("nil scenario without an error")
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("error %T %v, want *scenario.Error", err, err)
		}
		if lines := strings.Count(string(data), "\n") + 1; e.Line < 0 || e.Line > lines {
			t.Fatalf("error on line %d of a %d-line file: %v", e.Line, lines, err)
		}
	})
}
