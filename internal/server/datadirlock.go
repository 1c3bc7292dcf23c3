package server

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// LockFile is the file in the data dir that a server holds locked (flock)
// while it runs on a SQLite store: a second server on the same data dir
// refuses to start, naming the first (its PID and command line, written
// in the file).
const LockFile = "keel.lock"

// dataDirLock is a held LockFile; closing the file releases the lock, and
// the kernel releases it when the process dies however it dies.
type dataDirLock struct{ f *os.File }

// lockDataDir takes dataDir's LockFile without waiting. If another process
// holds it, the error names that process and what to do.
func lockDataDir(dataDir string) (*dataDirLock, error) {
	path := filepath.Join(dataDir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the data dir's lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data dir %s is in use by another keel process (%s, holding %s): stop it first, or start this one with another --data-dir; replicas share a PostgreSQL store ([keel] db), not a data dir",
				dataDir, holderText(holder), path)
		}
		return nil, fmt.Errorf("locking the data dir (%s): %w", path, err)
	}
	// Ours now: say who holds it (the file may hold a dead holder's text).
	text := fmt.Sprintf("pid %d, started %s: %s\n", os.Getpid(), time.Now().UTC().Format(time.RFC3339), strings.Join(os.Args, " "))
	if err := f.Truncate(0); err == nil {
		_, err = f.WriteAt([]byte(text), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("writing the data dir's lock %s: %w", path, err)
	}
	return &dataDirLock{f: f}, nil
}

// holderText is what the holder wrote in the lock file, on one line.
func holderText(data []byte) string {
	s := strings.TrimSpace(string(data))
	if s == "" {
		return "which has not yet written its PID"
	}
	return s
}

// release gives the lock up (it may be called on nil).
func (l *dataDirLock) release() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}
