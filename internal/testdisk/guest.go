package testdisk

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"keel/internal/compute/qemu/guest"
	"keel/internal/testenv"
)

// GuestImage writes keel's idle guest (qemu/guest) as a raw disk and as a
// qcow2 image of it (qemu-img convert) in a new temporary directory, and
// returns the directory and the two files.
func GuestImage(t testing.TB) (dir, raw, qcow string) {
	t.Helper()
	dir = t.TempDir()
	raw = filepath.Join(dir, "guest.raw")
	if err := os.WriteFile(raw, guest.Spec{Mode: guest.Idle}.Image(), 0o644); err != nil {
		t.Fatal(err)
	}
	qcow = filepath.Join(dir, "guest.qcow2")
	QemuImg(t, "convert", "-q", "-f", "raw", "-O", "qcow2", raw, qcow)
	return dir, raw, qcow
}

// QemuImg runs qemu-img with args and returns what it printed; an error
// fails the test, naming the command.
func QemuImg(t testing.TB, args ...string) []byte {
	t.Helper()
	testenv.External(t, "qemu-img (Debian's qemu-utils)")
	out, err := exec.Command("qemu-img", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return out
}

// Image is what qemu-img info says of an image file.
type Image struct {
	Format          string `json:"format"`
	BackingFilename string `json:"backing-filename"`
	BackingFormat   string `json:"backing-filename-format"`
}

// Info is qemu-img info of the image at path, read even while a guest
// has it open (-U).
func Info(t testing.TB, path string) Image {
	t.Helper()
	testenv.External(t, "qemu-img (Debian's qemu-utils)")
	var stderr bytes.Buffer
	cmd := exec.Command("qemu-img", "info", "-U", "--output=json", path)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("qemu-img info %s: %v: %s", path, err, stderr.Bytes())
	}
	var im Image
	if err := json.Unmarshal(out, &im); err != nil {
		t.Fatalf("qemu-img info %s: %v: %s", path, err, out)
	}
	return im
}
