package qemu

import (
	"context"

	"keel/internal/compute"
)

// A guest's serial console (its first serial port) is logged by QEMU to
// compute.ConsoleLogFile in the guest's directory, appended to across
// starts, reboots and resumes, and rotated past Config.ConsoleLogMax.

// DefaultConsoleLogMax is Config.ConsoleLogMax's default.
const DefaultConsoleLogMax = compute.DefaultConsoleLogMax

// consoleArgs are the QEMU arguments that log the first serial port to
// the console log (relative: QEMU runs in the guest's directory).
// append=on opens it O_APPEND, so the rotation's truncation makes QEMU's
// next write land at the start of the emptied file.
func consoleArgs() []string {
	return []string{"-chardev", "file,id=console,path=" + compute.ConsoleLogFile + ",append=on", "-serial", "chardev:console"}
}

// rotateConsoles bounds the console logs of every guest (the audit's
// periodic Guests call runs it).
func (d *Driver) rotateConsoles() {
	d.mu.Lock()
	dirs := make([]string, 0, len(d.vms))
	for _, v := range d.vms {
		dirs = append(dirs, v.dir)
	}
	d.mu.Unlock()
	for _, dir := range dirs {
		if err := compute.RotateConsoleLog(dir, d.cfg.ConsoleLogMax); err != nil {
			d.log.Warn("bounding a guest's console log", "dir", dir, "err", err)
		}
	}
}

// ConsoleOutput implements compute.ConsoleReader: the end of the guest's
// console log, the rotated part first, whether its QEMU runs or not (a
// stopped or suspended guest keeps its directory and log).
func (d *Driver) ConsoleOutput(_ context.Context, uuid string) ([]byte, error) {
	d.mu.Lock()
	v, ok := d.vms[uuid]
	d.mu.Unlock()
	if !ok {
		return nil, compute.NoGuest(uuid)
	}
	return compute.GuestConsoleLog(v.dir, d.cfg.ConsoleLogMax, d.log)
}
