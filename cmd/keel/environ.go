package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"

	"keel/internal/client"
)

// environ is what a keel command reads from the process it runs in: the
// environment variables (OS_CLOUD, OS_CLIENT_CONFIG_FILE, XDG_*, HOME,
// KEEL_CLOUD_AS_NOVA) and the working directory relative paths start
// from. main runs the commands in the process's own (the zero environ);
// a test gives each command line its own, so tests that set variables or
// change directory do not share the process's and can run in parallel.
type environ struct {
	// vars are the variables, KEY=value as exec.Cmd.Env has them; nil
	// means the process's.
	vars []string
	// dir is the working directory; "" means the process's.
	dir string
}

// environKey is the context key of the environ a command line runs in.
type environKey struct{}

// withEnviron is ctx carrying e for the commands run with it
// (ExecuteContext).
func withEnviron(ctx context.Context, e environ) context.Context {
	return context.WithValue(ctx, environKey{}, e)
}

// environOf is the environ ctx carries: the process's when it carries
// none.
func environOf(ctx context.Context) environ {
	e, _ := ctx.Value(environKey{}).(environ)
	return e
}

// getenv is the value of the variable key ("" when unset).
func (e environ) getenv(key string) string {
	if e.vars == nil {
		return os.Getenv(key)
	}
	for i := len(e.vars) - 1; i >= 0; i-- { // the last one wins, as in exec.Cmd.Env
		if k, v, ok := strings.Cut(e.vars[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}

// environment is the variables, for a process keel starts.
func (e environ) environment() []string {
	if e.vars == nil {
		return os.Environ()
	}
	return e.vars
}

// path resolves p, relative to the working directory, against dir.
func (e environ) path(p string) string {
	if p == "" || e.dir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(e.dir, p)
}

// clientOptions are the client's options in this environ.
func (e environ) clientOptions(o client.Options) client.Options {
	if e.vars != nil {
		o.Getenv = e.getenv
	}
	o.Dir = e.dir
	return o
}

// homeDir is the user's home directory: the process's, or $HOME of vars.
func (e environ) homeDir() (string, error) {
	if e.vars == nil {
		return os.UserHomeDir()
	}
	if home := e.getenv("HOME"); home != "" {
		return home, nil
	}
	return "", errors.New("$HOME is not defined")
}
