package qemu

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"keel/internal/compute"
)

// A guest's serial console (its first serial port) is logged by QEMU to
// fileConsole in the guest's directory, appended to across starts,
// reboots and resumes; when it outgrows Config.ConsoleLogMax the driver
// rotates it into fileConsoleOld (one old file, as a log rotator keeps).
const (
	fileConsole    = "console.log"
	fileConsoleOld = "console.log.0"
	// DefaultConsoleLogMax is Config.ConsoleLogMax's default.
	DefaultConsoleLogMax = 1 << 20
)

// consoleArgs are the QEMU arguments that log the first serial port to
// fileConsole (relative: QEMU runs in the guest's directory). append=on
// opens it O_APPEND, so the driver's truncation when it rotates the log
// makes QEMU's next write land at the start of the emptied file.
func consoleArgs() []string {
	return []string{"-chardev", "file,id=console,path=" + fileConsole + ",append=on", "-serial", "chardev:console"}
}

// rotateConsole bounds a guest's console log: past max bytes it is
// copied to fileConsoleOld (replacing the older one) and emptied. A line
// the guest writes between the copy and the truncation is lost.
func rotateConsole(dir string, max int64) error {
	path := filepath.Join(dir, fileConsole)
	fi, err := os.Stat(path)
	if err != nil || fi.Size() <= max {
		return nil // no log yet, or small enough
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("rotating the console log: %w", err)
	}
	defer f.Close()
	old := filepath.Join(dir, fileConsoleOld)
	tmp, err := os.CreateTemp(dir, fileConsoleOld+".*")
	if err != nil {
		return fmt.Errorf("rotating the console log: %w", err)
	}
	_, err = io.Copy(tmp, f)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), old)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("rotating the console log: %w", err)
	}
	if err := os.Truncate(path, 0); err != nil {
		return fmt.Errorf("rotating the console log: %w", err)
	}
	return nil
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
		if err := rotateConsole(dir, d.cfg.ConsoleLogMax); err != nil {
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
	if err := rotateConsole(v.dir, d.cfg.ConsoleLogMax); err != nil {
		d.log.Warn("bounding a guest's console log", "instance", uuid, "err", err)
	}
	return compute.TailFiles(compute.MaxConsoleBytes, filepath.Join(v.dir, fileConsoleOld), filepath.Join(v.dir, fileConsole))
}
