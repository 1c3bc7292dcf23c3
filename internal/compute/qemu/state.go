package qemu

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/guestdisk"
)

// vmState is what guest.json keeps about one guest.
type vmState struct {
	Guest compute.Guest `json:"guest"`
	// Program is the guest's keel_guest metadata (idle, fill-N, dirty-N).
	Program string `json:"program,omitempty"`
	// Image is the uploaded image the guest boots (its disk an overlay
	// on the image's base); empty for keel's built-in guest.
	Image string `json:"image,omitempty"`
	// Dest and URI are the outgoing copy's destination host and QEMU URI,
	// while Guest.State is migrating.
	Dest string `json:"dest,omitempty"`
	URI  string `json:"uri,omitempty"`
	// PostCopy records that the incoming side enabled post-copy.
	PostCopy bool `json:"post_copy,omitempty"`
}

// Files in a guest's directory.
const (
	fileState    = "guest.json"
	filePID      = "qemu.pid"
	fileLog      = "qemu.log"
	fileDisk     = guestdisk.File
	sockQMP      = "qmp.sock"
	sockPeek     = "peek.sock"
	sockIncoming = "incoming.sock"
)

func readState(dir string) (vmState, int, error) {
	var st vmState
	data, err := os.ReadFile(filepath.Join(dir, fileState))
	if err != nil {
		return st, 0, err
	}
	if err := json.Unmarshal(data, &st); err != nil {
		return st, 0, fmt.Errorf("reading %s: %w", filepath.Join(dir, fileState), err)
	}
	pid := 0
	if b, err := os.ReadFile(filepath.Join(dir, filePID)); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	return st, pid, nil
}

func writeState(dir string, st vmState) error {
	data, _ := json.MarshalIndent(st, "", "  ")
	return writeFileAtomic(filepath.Join(dir, fileState), data)
}

func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// processIn reports whether pid is a live (not zombie) process whose
// working directory is dir: QEMU runs in its guest's directory, which
// tells it from any process that reused the pid.
func processIn(pid int, dir string) bool {
	if pid <= 0 {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(stat), ')'); i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X' {
		return false
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return false
	}
	want, err := filepath.EvalSymlinks(dir)
	if err != nil {
		want = dir
	}
	return cwd == want
}

// killIn kills the QEMU with pid running in dir and waits (up to 10 s) for
// it to be gone.
func killIn(pid int, dir string, exited <-chan struct{}) error {
	if !processIn(pid, dir) {
		return nil
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && err != syscall.ESRCH {
		return fmt.Errorf("killing qemu %d: %w", pid, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if exited != nil {
			select {
			case <-exited:
				return nil
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		if !processIn(pid, dir) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("qemu %d still running 10 s after SIGKILL", pid)
}

// KillAll kills every QEMU the driver (or an earlier agent on the same
// directory) started under dir and returns how many it killed. Tests use
// it to leave nothing running; an operator can use `keel` to delete
// servers instead.
func KillAll(dir string) int {
	entries, _ := os.ReadDir(dir)
	n := 0
	for _, e := range entries {
		gdir := filepath.Join(dir, e.Name())
		if _, pid, err := readState(gdir); err == nil && processIn(pid, gdir) {
			if killIn(pid, gdir, nil) == nil {
				n++
			}
		}
	}
	return n
}

// logTail returns the last lines of a guest's QEMU stderr, one line.
func logTail(dir string) string {
	data, err := os.ReadFile(filepath.Join(dir, fileLog))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	lines = lines[max(0, len(lines)-4):]
	return strings.Join(lines, "; ")
}
