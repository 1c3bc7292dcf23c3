package config

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzParse: any file either parses or is refused with *Error values (one
// or joined) each naming a line inside the file (or none) — never a panic.
func FuzzParse(f *testing.F) {
	if sample, err := os.ReadFile("../../etc/keel.conf.sample"); err == nil {
		f.Add(sample)
	} else {
		f.Fatal(err)
	}
	f.Add([]byte("[DEFAULT]\nhost_subset_size = x\n"))
	f.Add([]byte("[filter_scheduler]\nram_weight_multiplier = 1e999\n[keel\n"))
	f.Add([]byte("  = \n[]\n=\n"))
	f.Add([]byte("\xef\xbb\xbf[DEFAULT]\nlisten = 127.0.0.1:-1\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _, err := Parse("keel.conf", data)
		if err == nil {
			return
		}
		lines := strings.Count(string(data), "\n") + 1
		var errs []error
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = j.Unwrap()
		} else {
			errs = []error{err}
		}
		for _, one := range errs {
			var e *Error
			if !errors.As(one, &e) {
				t.Fatalf("error %T %v, want *config.Error", one, one)
			}
			if e.Line < 0 || e.Line > lines {
				t.Fatalf("error on line %d of a %d-line file: %v", e.Line, lines, one)
			}
		}
	})
}
