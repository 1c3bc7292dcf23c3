package server

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestDataDirLock: a data dir locked by one holder refuses a second, whose
// error names the holder's PID; once released, it is taken again.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir)
	if err == nil {
		t.Fatal("a second lock of a locked data dir was taken")
	}
	for _, want := range []string{"in use by another keel process", fmt.Sprintf("pid %d,", os.Getpid()), "--data-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("second lock's error %q does not say %q", err, want)
		}
	}
	first.release()
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("locking again after the release: %v", err)
	}
	again.release()
}
