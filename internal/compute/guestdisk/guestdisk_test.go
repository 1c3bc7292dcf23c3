package guestdisk

import (
	"os"
	"path/filepath"
	"testing"
)

// TestCheckDiskTarget: the source writes a cold move's disk only where a
// driver keeps that instance's disk, whatever path the destination's
// answer names.
func TestCheckDiskTarget(t *testing.T) {
	const uuid = "7b5c1a2e-0000-4000-8000-000000000001"
	dir := t.TempDir()
	good := filepath.Join(dir, uuid)
	if err := os.Mkdir(good, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "elsewhere")
	if err := os.Mkdir(other, 0o755); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, "linked")
	if err := os.MkdirAll(linked, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, filepath.Join(linked, uuid)); err != nil {
		t.Fatal(err)
	}
	withLink := filepath.Join(dir, "withlink", uuid)
	if err := os.MkdirAll(withLink, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(other, "victim"), filepath.Join(withLink, File)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		to string
		ok bool
	}{
		{filepath.Join(good, File), true},
		{uuid + "/" + File, false},                         // relative
		{good + "/../" + uuid + "/" + File, false},         // not clean
		{filepath.Join(good, "keel.db"), false},            // not the disk
		{filepath.Join(other, File), false},                // another instance's (or none's) directory
		{"/etc/" + File, false},                            // a system file
		{filepath.Join(linked, uuid, File), false},         // its directory is a link
		{filepath.Join(withLink, File), false},             // the disk is a link
		{filepath.Join(dir, "missing", uuid, File), false}, // no such directory
	} {
		err := CheckTarget(tc.to, uuid)
		if (err == nil) != tc.ok {
			t.Errorf("CheckTarget(%q) = %v, want ok=%v", tc.to, err, tc.ok)
		}
	}
	// Copy never follows a link left where its part file goes.
	victim := filepath.Join(other, "victim2")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, []byte("disk bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	to := filepath.Join(good, File)
	if err := os.Symlink(victim, to+".part"); err != nil {
		t.Fatal(err)
	}
	if err := Copy(src, to); err != nil {
		t.Fatalf("Copy: %v", err)
	}
	if got, _ := os.ReadFile(victim); string(got) != "keep" {
		t.Fatalf("Copy wrote through a link: the victim reads %q", got)
	}
	if got, _ := os.ReadFile(to); string(got) != "disk bytes" {
		t.Fatalf("copied disk reads %q", got)
	}
}
