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
	f.Add([]byte("duration = 60\n[[flavor]]\nname = \"s\"\nvcpus = 1\nram = 1024\n[[hosts]]\nname = \"a\"\nvcpus = 2\nmemory_mb = 4096\ndisk_gb = 10\ntraits = [\"CUSTOM_X\"]\n[[server_group]]\nname = \"g\"\npolicy = \"affinity\"\n[[aggregate]]\nname = \"z\"\nhosts = [\"a\"]\n[[instance]]\nhost = \"a\"\nflavor = \"s\"\ngroup = \"g\"\n"))
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
