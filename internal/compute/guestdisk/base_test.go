package guestdisk

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"keel/internal/testdisk"
	"keel/internal/testenv"
)

// fileSource serves one file as every image, counting the fetches.
type fileSource struct {
	path, format string
	fetches      atomic.Int32
}

func (s *fileSource) FetchImage(_ context.Context, _, id string, w io.Writer) (ImageInfo, error) {
	s.fetches.Add(1)
	data, err := os.ReadFile(s.path)
	if err != nil {
		return ImageInfo{}, err
	}
	sum := md5.Sum(data)
	_, err = w.Write(data)
	return ImageInfo{ID: id, DiskFormat: s.format, Size: int64(len(data)), Checksum: hex.EncodeToString(sum[:])}, err
}

// TestBaseFetchesOnceAndRefuses: guests booting one image at once fetch
// it once; a qcow2 with an external data file, and an image ID that is
// not a UUID, are refused and leave nothing in the cache.
func TestBaseFetchesOnceAndRefuses(t *testing.T) {
	testenv.External(t, "qemu-img (Debian's qemu-utils)")
	ctx := context.Background()
	work := t.TempDir()
	raw := filepath.Join(work, "a.raw")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	src := &fileSource{path: raw, format: "raw"}
	c := &Images{Dir: t.TempDir(), Source: src}
	const id = "0b6f2c3e-1d4a-4f1e-8b7a-00000000e001"
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			base, err := c.Base(ctx, fmt.Sprint("guest", i), id)
			if err == nil {
				err = c.Overlay(ctx, base, filepath.Join(c.Dir, fmt.Sprint("g", i), File))
			}
			errs <- err
		}()
		if err := os.MkdirAll(filepath.Join(c.Dir, fmt.Sprint("g", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := src.fetches.Load(); n != 1 {
		t.Errorf("four guests of one image fetched it %d times, want once", n)
	}

	withData := filepath.Join(work, "d.qcow2")
	testdisk.QemuImg(t, "create", "-q", "-f", "qcow2", "-o", "data_file="+raw+",data_file_raw=on", withData, "1M")
	bad := &Images{Dir: c.Dir, Source: &fileSource{path: withData, format: "qcow2"}}
	const badID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000e002"
	if _, err := bad.Base(ctx, "g", badID); err == nil || !strings.Contains(err.Error(), "external data file") {
		t.Errorf("a qcow2 with a data file: %v, want refused", err)
	}
	if _, err := c.Base(ctx, "g", "../../etc"); err == nil {
		t.Error("an image ID that is a path was taken")
	}
	entries, _ := os.ReadDir(filepath.Join(c.Dir, BaseDir))
	if len(entries) != 1 || entries[0].Name() != id {
		t.Errorf("the cache holds %v, want only %s", entries, id)
	}
}
