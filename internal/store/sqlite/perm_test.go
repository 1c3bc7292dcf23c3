package sqlite

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"keel/internal/records"
)

// TestFilesAreOwnerOnly: a new store's files (the database, its -wal and
// -shm) are 0600; files an older keel left readable by others are made
// 0600 when a store opens, with a log line naming each.
func TestFilesAreOwnerOnly(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "keel.db")
	files := []string{path, path + "-wal", path + "-shm"}
	modes := func() map[string]os.FileMode {
		out := map[string]os.FileMode{}
		for _, f := range files {
			if st, err := os.Stat(f); err == nil {
				out[filepath.Base(f)] = st.Mode().Perm()
			}
		}
		return out
	}
	open := func(log *slog.Logger) *Store {
		t.Helper()
		s, err := OpenWith(ctx, path, Options{Log: log})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.CreateInstance(ctx, records.Instance{UUID: "i-" + filepath.Base(t.TempDir()), ProjectID: "p", UserID: "u"}); err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(nil)
	got := modes()
	if len(got) != 3 {
		t.Fatalf("files after a write: %v, want the database, -wal and -shm", got)
	}
	for f, m := range got {
		if m != 0o600 {
			t.Errorf("new store: %s is %v, want 0600", f, m)
		}
	}
	// An older keel's files, readable by all, -wal and -shm still there
	// (its process was killed, or, as here, it still runs).
	for _, f := range files {
		if err := os.Chmod(f, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	defer s.Close()
	var buf bytes.Buffer
	s2 := open(slog.New(slog.NewTextHandler(&buf, nil)))
	defer s2.Close()
	for f, m := range modes() {
		if m != 0o600 {
			t.Errorf("reopened store: %s is %v, want 0600", f, m)
		}
	}
	for _, f := range files {
		if !strings.Contains(buf.String(), "file="+f+" ") {
			t.Errorf("no log line names %s: %q", f, buf.String())
		}
	}
}
