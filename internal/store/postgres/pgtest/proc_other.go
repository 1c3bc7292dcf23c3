//go:build !linux

package pgtest

import "os/exec"

// setCredential is only implemented on Linux; elsewhere tests must not run
// as root (initdb refuses it and says so).
func setCredential(*exec.Cmd, *account) {}

// setDeathSignal is Linux-only; elsewhere a killed test binary leaves its
// postmaster running until stopped by hand.
func setDeathSignal(*exec.Cmd) {}

// processAlive is Linux-only; elsewhere every stale directory is kept.
func processAlive(int) bool { return true }
