package computeapi_test

import (
	"flag"
	"testing"

	"keel/internal/store/postgres/pgtest"
)

// pgFuzzAll makes the PostgreSQL fuzz target's seed corpus cross every
// seed with every write (longer), as the in-memory target's does.
var pgFuzzAll = flag.Bool("pgfuzz.all", false, "run the PostgreSQL fuzz target's whole seed corpus (every seed on every write)")

// TestMain runs the throw-away PostgreSQL cluster the PostgreSQL fuzz
// target uses (started on first use only).
func TestMain(m *testing.M) { pgtest.Main(m) }
