package conductor_test

import (
	"testing"

	"keel/internal/cloudtest"
)

// TestScripts runs the conductor's scenarios written as scripts
// (testdata/*.txt; the commands are cloudtest.RunScripts'). After a change
// made on purpose, `go test ./internal/conductor/ -run TestScripts
// -rewrite` writes the new output into the files: read the diff.
func TestScripts(t *testing.T) { cloudtest.RunScripts(t, "testdata") }
