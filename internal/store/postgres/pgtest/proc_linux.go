package pgtest

import (
	"os/exec"
	"syscall"
)

// setCredential makes cmd run as a.
func setCredential(cmd *exec.Cmd, a *account) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid, NoSetGroups: true}
}

// setDeathSignal has the kernel send the postmaster SIGQUIT (immediate
// shutdown) if the test binary dies without stopping it.
func setDeathSignal(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
}

// processAlive reports whether process pid exists (or might: one we may not
// signal counts as alive).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || err == syscall.EPERM
}
