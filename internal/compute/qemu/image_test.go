package qemu

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/compute/guestdisk"
	"keel/internal/lifecycle"
	"keel/internal/records"
	"keel/internal/testdisk"
)

// imageFiles serves images from files, as the servers' image store does
// over the bus (rpc.Store), and counts the fetches.
type imageFiles struct {
	mu      sync.Mutex
	files   map[string]compute.ImageInfo
	paths   map[string]string
	fetches map[string]int
}

func (s *imageFiles) add(t *testing.T, id, format, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := md5.Sum(data)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.files == nil {
		s.files, s.paths, s.fetches = map[string]compute.ImageInfo{}, map[string]string{}, map[string]int{}
	}
	s.files[id] = compute.ImageInfo{ID: id, DiskFormat: format, Size: int64(len(data)), Checksum: hex.EncodeToString(sum[:])}
	s.paths[id] = path
}

func (s *imageFiles) FetchImage(_ context.Context, _, id string, w io.Writer) (compute.ImageInfo, error) {
	s.mu.Lock()
	info, ok := s.files[id]
	path := s.paths[id]
	s.fetches[id]++
	s.mu.Unlock()
	if !ok {
		return info, fmt.Errorf("no image %s", id)
	}
	f, err := os.Open(path)
	if err != nil {
		return info, err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return info, err
}

// drop deletes image id, as the servers delete an image.
func (s *imageFiles) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.files, id)
}

func (s *imageFiles) fetched(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fetches[id]
}

// TestBootUploadedImage boots keel's guest from an uploaded qcow2 image
// (real qemu-img, real QEMU): the host fetches the image once into
// _base/<id> (raw), each guest's disk is a qcow2 overlay on it named
// relatively, the guest runs (its heartbeat rises) and a stop and start
// keep its overlay. A qcow2 naming a backing file, and data whose MD5 is
// not the image's checksum, are refused with what is wrong, and leave
// nothing in the cache.
func TestBootUploadedImage(t *testing.T) {
	ctx := context.Background()
	shortPowerDown(t)
	src := &imageFiles{}
	d := newDriver(t, Config{Images: src})
	work, raw, good := testdisk.GuestImage(t)
	const imageID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000a001"
	src.add(t, imageID, "qcow2", good)

	boot := func(uuid, image string) error {
		inst := records.Instance{UUID: uuid, Name: "img", ImageRef: image, Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
		spawned := make(chan error, 1)
		d.Spawn(ctx, inst, func(err error) { spawned <- err })
		return waitDone(t, spawned, 60*time.Second)
	}
	g1, g2 := "6f0c1c6e-0000-4000-8000-0000000000b1", "6f0c1c6e-0000-4000-8000-0000000000b2"
	for _, g := range []string{g1, g2} {
		if err := boot(g, imageID); err != nil {
			t.Fatalf("boot of %s from the uploaded image: %v", g, err)
		}
		waitRising(t, d, g, 0)
	}
	if n := src.fetched(imageID); n != 1 {
		t.Errorf("the image was fetched %d times for two guests, want once", n)
	}
	base := filepath.Join(d.cfg.Dir, guestdisk.BaseDir, imageID)
	if info := testdisk.Info(t, base); info.Format != "raw" {
		t.Errorf("the base %s is %s, want raw (converted)", base, info.Format)
	}
	disk := filepath.Join(d.cfg.Dir, g1, fileDisk)
	info := testdisk.Info(t, disk)
	if info.Format != "qcow2" || info.BackingFilename != filepath.Join("..", guestdisk.BaseDir, imageID) || info.BackingFormat != "raw" {
		t.Errorf("the guest's disk is %+v, want a qcow2 overlay on ../_base/%s (raw)", info, imageID)
	}

	// A stop and a start boot the same overlay (its writes would stay).
	inst := records.Instance{UUID: g1, ImageRef: imageID, Flavor: records.Flavor{Name: "tiny", VCPUs: 1, RAMMB: 64}}
	before, err := os.Stat(disk)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range []string{lifecycle.OpStop, lifecycle.OpStart} {
		if err := d.Lifecycle(ctx, inst, op); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	waitRising(t, d, g1, 0)
	if after, err := os.Stat(disk); err != nil || !os.SameFile(before, after) {
		t.Errorf("the start made a new disk (%v)", err)
	}
	if err := d.Destroy(ctx, g1); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(base); err != nil {
		t.Errorf("destroying a guest removed the base its other guest boots on: %v", err)
	}

	// A qcow2 whose header names a backing file on the host.
	bad := filepath.Join(work, "backed.qcow2")
	testdisk.QemuImg(t, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", raw, bad)
	const badID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000a002"
	src.add(t, badID, "qcow2", bad)
	err = boot("6f0c1c6e-0000-4000-8000-0000000000b3", badID)
	if err == nil || !strings.Contains(err.Error(), "names a backing file") || !strings.Contains(err.Error(), raw) {
		t.Fatalf("boot from a qcow2 with a backing file: %v, want a refusal naming it", err)
	}
	t.Logf("refused: %v", err)

	// Data that is not what the image's checksum says.
	const sumID = "0b6f2c3e-1d4a-4f1e-8b7a-00000000a003"
	src.add(t, sumID, "raw", raw)
	src.mu.Lock()
	info2 := src.files[sumID]
	info2.Checksum = strings.Repeat("0", 32)
	src.files[sumID] = info2
	src.mu.Unlock()
	err = boot("6f0c1c6e-0000-4000-8000-0000000000b4", sumID)
	if err == nil || !strings.Contains(err.Error(), "MD5") {
		t.Fatalf("boot from data that does not match its checksum: %v", err)
	}
	entries, err := os.ReadDir(filepath.Join(d.cfg.Dir, guestdisk.BaseDir))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 1 || names[0] != imageID {
		t.Errorf("the cache holds %v, want only %s", names, imageID)
	}

	// A restarted driver keeps the guest and skips the cache directory.
	var logged bytes.Buffer
	again, err := New(Config{Dir: d.cfg.Dir, Images: src, Log: slog.New(slog.NewTextHandler(&logged, nil))})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := again.Guests(ctx)
	if len(gs) != 1 || gs[0].UUID != g2 {
		t.Errorf("adopted %+v, want %s", gs, g2)
	}
	if strings.Contains(logged.String(), guestdisk.BaseDir) {
		t.Errorf("the restart took the cache for a guest: %s", logged.String())
	}
}
