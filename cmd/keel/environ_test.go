package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"
)

// testEnvirons are the tests' environs (*testing.T → environ): setenv and
// chdir change a test's own, and run runs the commands in it, so a test
// that sets a variable or a directory leaves the process's alone (as
// t.Setenv and t.Chdir do not) and may run in parallel.
var testEnvirons sync.Map

// environFor is t's environ: the process's until setenv or chdir.
func environFor(t testing.TB) environ {
	e, _ := testEnvirons.Load(t)
	env, _ := e.(environ)
	return env
}

// setEnviron makes e t's environ until t ends.
func setEnviron(t testing.TB, e environ) {
	if _, loaded := testEnvirons.Swap(t, e); !loaded {
		t.Cleanup(func() { testEnvirons.Delete(t) })
	}
}

// setenv sets key to value in t's environ (the commands t runs see it;
// the process does not).
func setenv(t testing.TB, key, value string) {
	t.Helper()
	e := environFor(t)
	if e.vars == nil {
		e.vars = os.Environ()
	}
	e.vars = append(slices.DeleteFunc(slices.Clone(e.vars), func(kv string) bool { return strings.HasPrefix(kv, key+"=") }), key+"="+value)
	setEnviron(t, e)
}

// chdir makes dir the working directory of the commands t runs.
func chdir(t testing.TB, dir string) {
	t.Helper()
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	e := environFor(t)
	e.dir = abs
	setEnviron(t, e)
}

// execute runs root in t's environ with ctx.
func execute(ctx context.Context, t testing.TB, root *cobra.Command) error {
	return root.ExecuteContext(withEnviron(ctx, environFor(t)))
}

// runIO runs the keel command line args in t's environ, its output to
// out and its errors to errOut.
func runIO(t testing.TB, out, errOut io.Writer, args ...string) error {
	t.Helper()
	root := rootCommand()
	root.SetOut(out)
	root.SetErr(errOut)
	root.SetArgs(args)
	return execute(context.Background(), t, root)
}

// TestEnvironIsTheTests: a variable and a directory set for one test are
// what its commands see, and not what the process or another test sees.
func TestEnvironIsTheTests(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	setenv(t, "KEEL_ENVIRON_TEST", "one")
	setenv(t, "KEEL_ENVIRON_TEST", "two")
	chdir(t, dir)
	e := environFor(t)
	if got := e.getenv("KEEL_ENVIRON_TEST"); got != "two" {
		t.Errorf("getenv = %q, want two (the last set)", got)
	}
	if n := strings.Count(strings.Join(e.environment(), "\n"), "KEEL_ENVIRON_TEST="); n != 1 {
		t.Errorf("the variable is in the environment %d times, want once", n)
	}
	if got := e.path("scenarios/a.toml"); got != filepath.Join(dir, "scenarios/a.toml") {
		t.Errorf("path = %q, want it under %s", got, dir)
	}
	if got := e.path("/abs"); got != "/abs" {
		t.Errorf("an absolute path changed: %q", got)
	}
	if os.Getenv("KEEL_ENVIRON_TEST") != "" {
		t.Error("the process's environment changed")
	}
	t.Run("other", func(t *testing.T) {
		if e := environFor(t); e.vars != nil || e.dir != "" || e.getenv("KEEL_ENVIRON_TEST") != "" {
			t.Errorf("another test's environ is not the process's: %+v", e)
		}
	})
	var zero environ
	if got := zero.path("x"); got != "x" {
		t.Errorf("the process's environ changed a relative path: %q", got)
	}
}
