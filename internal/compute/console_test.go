package compute

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsoleLogRotation: a log past the bound moves to console.log.0 and
// the live one empties; a writer holding it open in append mode (as QEMU
// does with append=on) goes on at its start; the read joins both, the
// old part first, and keeps only the last MaxConsoleBytes.
func TestConsoleLogRotation(t *testing.T) {
	dir := t.TempDir()
	w, err := os.OpenFile(filepath.Join(dir, ConsoleLogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString("line one\nline two\n"); err != nil {
		t.Fatal(err)
	}
	if err := RotateConsoleLog(dir, 100); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ConsoleLogFile)); len(b) != 18 {
		t.Fatalf("a log under the bound was rotated: %q left", b)
	}
	if _, err := w.WriteString(strings.Repeat("x", 100) + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := RotateConsoleLog(dir, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteString("after\n"); err != nil {
		t.Fatal(err)
	}
	cur, _ := os.ReadFile(filepath.Join(dir, ConsoleLogFile))
	old, _ := os.ReadFile(filepath.Join(dir, ConsoleLogOld))
	if string(cur) != "after\n" || !strings.HasPrefix(string(old), "line one\n") || len(old) != 119 {
		t.Fatalf("after rotation: live %q, old %d bytes %q…", cur, len(old), old[:min(len(old), 20)])
	}
	all, err := TailFiles(MaxConsoleBytes, filepath.Join(dir, ConsoleLogOld), filepath.Join(dir, ConsoleLogFile))
	if err != nil || string(all) != string(old)+"after\n" {
		t.Fatalf("read: %q %v", all, err)
	}
	tail, err := TailFiles(10, filepath.Join(dir, ConsoleLogOld), filepath.Join(dir, ConsoleLogFile))
	if err != nil || string(tail) != "xxx\nafter\n" {
		t.Fatalf("last 10 bytes: %q %v", tail, err)
	}
}
