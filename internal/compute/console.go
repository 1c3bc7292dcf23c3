package compute

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"keel/internal/store"
)

// MaxConsoleBytes bounds what a console read returns: the end of the
// guest's serial log, as Nova's libvirt driver reads the last 100 KiB.
const MaxConsoleBytes = 100 << 10

// ErrNoConsole says the host's driver keeps no console log for its
// guests (os-getConsoleOutput is then 501, as Nova answers a driver
// without get_console_output).
var ErrNoConsole = errors.New("this host's virt driver keeps no console log")

// ConsoleReader is the part of Driver that reads each guest's serial
// console log.
type ConsoleReader interface {
	// ConsoleOutput returns the end of the guest's console log, at most
	// MaxConsoleBytes, whatever the guest's power state (a stopped
	// guest's log is still there). A guest the driver does not have is
	// an error wrapping store.ErrNotFound.
	ConsoleOutput(ctx context.Context, uuid string) ([]byte, error)
}

// ConsoleOutput is Nova's get_console_output on this host: the end of
// the guest's serial console log, from the driver.
func (m *Manager) ConsoleOutput(ctx context.Context, uuid string) ([]byte, error) {
	out, err := m.driver.ConsoleOutput(ctx, uuid)
	if err != nil {
		return nil, fmt.Errorf("console output of %s on %s: %w", uuid, m.host, err)
	}
	return out, nil
}

// A guest's serial console log, as the QEMU and libvirt drivers keep it
// in the guest's directory: written by QEMU in append mode across starts,
// reboots and resumes; past a bound it is rotated into ConsoleLogOld (one
// old file, as a log rotator keeps).
const (
	ConsoleLogFile = "console.log"
	ConsoleLogOld  = "console.log.0"
	// DefaultConsoleLogMax is the size past which a guest's console log
	// is rotated unless a driver is told otherwise.
	DefaultConsoleLogMax = 1 << 20
)

// RotateConsoleLog bounds the console log in a guest's directory: past
// max bytes it is copied to ConsoleLogOld (replacing the older one) and
// emptied. The writer holds it in append mode, so its next write lands at
// the start of the emptied file; a line written between the copy and the
// truncation is lost.
func RotateConsoleLog(dir string, max int64) error {
	path := filepath.Join(dir, ConsoleLogFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Size() <= max {
		return nil // no log yet, or small enough
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("rotating the console log: %w", err)
	}
	defer f.Close()
	tmp, err := os.CreateTemp(dir, ConsoleLogOld+".*")
	if err != nil {
		return fmt.Errorf("rotating the console log: %w", err)
	}
	_, err = io.Copy(tmp, f)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, ConsoleLogOld))
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

// GuestConsoleLog is the end of the console log in a guest's directory
// (at most MaxConsoleBytes, the rotated part first), bounding it to max
// first. A log that is not there yet reads as empty.
func GuestConsoleLog(dir string, max int64, log *slog.Logger) ([]byte, error) {
	if err := RotateConsoleLog(dir, max); err != nil && log != nil {
		log.Warn("bounding a guest's console log", "dir", dir, "err", err)
	}
	return TailFiles(MaxConsoleBytes, filepath.Join(dir, ConsoleLogOld), filepath.Join(dir, ConsoleLogFile))
}

// NoGuest is the error a driver's ConsoleOutput returns for a guest it
// does not have.
func NoGuest(uuid string) error {
	return fmt.Errorf("guest %s is not on this host: %w", uuid, store.ErrNotFound)
}

// TailFiles returns the last max bytes of the files in order (older
// first: a rotated log before the current one), as one log. A file that
// does not exist counts as empty.
func TailFiles(max int64, paths ...string) ([]byte, error) {
	var out []byte
	for i := len(paths) - 1; i >= 0 && int64(len(out)) < max; i-- {
		b, err := tailFile(paths[i], max-int64(len(out)))
		if err != nil {
			return nil, err
		}
		out = append(b, out...)
	}
	return out, nil
}

// tailFile reads the last n bytes of path (all of it if shorter).
func tailFile(path string, n int64) ([]byte, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the console log: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("reading the console log: %w", err)
	}
	off := max(fi.Size()-n, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil {
		return nil, fmt.Errorf("reading the console log %s: %w", path, err)
	}
	return b, nil
}
