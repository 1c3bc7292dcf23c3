package rpc_test

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"keel/internal/compute"
	"keel/internal/records"
	"keel/internal/rpc"
	"keel/internal/store"
	"keel/internal/store/memory"
)

// memImages serves images from memory, as the servers' image store does.
type memImages map[string][]byte

func (m memImages) ReadImage(_ context.Context, id string, off int64, p []byte) (compute.ImageInfo, int, error) {
	data, ok := m[id]
	if !ok {
		return compute.ImageInfo{}, 0, fmt.Errorf("image %s: %w", id, store.ErrNotFound)
	}
	sum := md5.Sum(data)
	info := compute.ImageInfo{ID: id, DiskFormat: "raw", Size: int64(len(data)), Checksum: hex.EncodeToString(sum[:])}
	if off >= int64(len(data)) {
		return info, 0, nil
	}
	return info, copy(p, data[off:]), nil
}

// TestReadImage: an agent reads, in chunks over the bus, the image an
// instance on its host boots from; it may not read another image for it,
// nor an image for an instance of another host or no instance.
func TestReadImage(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	servers, conn := startBus(ctx, t)
	st := memory.New()
	const img1, img2 = "0b6f2c3e-1d4a-4f1e-8b7a-00000000c001", "0b6f2c3e-1d4a-4f1e-8b7a-00000000c002"
	data := make([]byte, 2*rpc.ImageChunkMax+12345) // three chunks
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	images := memImages{img1: data, img2: []byte("another image")}
	subs, err := rpc.ServeConductor(conn(servers), rpc.ConductorHandlers{Store: st, Reporter: &builds{}, Images: images,
		NewProviderUUID: func() string { return "00000000-0000-0000-0000-0000000000a1" }})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range subs {
			_ = s.Unsubscribe()
		}
	}()
	a := &rpc.Store{Conn: conn(mustAgent(t, servers, "A")), Host: "A"}
	for _, inst := range []records.Instance{
		{UUID: "6f0c1c6e-0000-4000-8000-0000000000c1", Host: "A", ImageRef: img1, ProjectID: "p", UserID: "u"},
		{UUID: "6f0c1c6e-0000-4000-8000-0000000000c2", Host: "B", ImageRef: img1, ProjectID: "p", UserID: "u"},
		{UUID: "6f0c1c6e-0000-4000-8000-0000000000c3", Host: "A", ImageRef: "0b6f2c3e-1d4a-4f1e-8b7a-00000000c009", ProjectID: "p", UserID: "u"},
		// Unshelving from its snapshot img2, booted from img1 at first.
		{UUID: "6f0c1c6e-0000-4000-8000-0000000000c5", Host: "A", ImageRef: img1, Lifecycle: records.Lifecycle{ShelvedImage: img2}, ProjectID: "p", UserID: "u"},
	} {
		if _, err := st.CreateInstance(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}

	var got bytes.Buffer
	info, err := a.FetchImage(ctx, "6f0c1c6e-0000-4000-8000-0000000000c1", img1, &got)
	if err != nil {
		t.Fatalf("A reads its instance's image: %v", err)
	}
	sum := md5.Sum(data)
	if !bytes.Equal(got.Bytes(), data) || info.Size != int64(len(data)) || info.Checksum != hex.EncodeToString(sum[:]) {
		t.Errorf("read %d bytes (equal: %v), info %+v; want the image's %d", got.Len(), bytes.Equal(got.Bytes(), data), info, len(data))
	}
	// An unshelve boots from the shelve's snapshot and rebases the disk
	// onto the image the server was booted from: both are the instance's.
	for _, img := range []string{img2, img1} {
		if _, err := a.FetchImage(ctx, "6f0c1c6e-0000-4000-8000-0000000000c5", img, &bytes.Buffer{}); err != nil {
			t.Errorf("A reads image %s of its unshelving instance: %v", img, err)
		}
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, store.ErrForbidden) {
			t.Errorf("%s: err = %v, want forbidden", what, err)
		}
	}
	_, err = a.FetchImage(ctx, "6f0c1c6e-0000-4000-8000-0000000000c1", img2, &bytes.Buffer{})
	forbidden("A reads an image its instance does not boot", err)
	_, err = a.FetchImage(ctx, "6f0c1c6e-0000-4000-8000-0000000000c2", img1, &bytes.Buffer{})
	forbidden("A reads the image of B's instance", err)
	_, err = a.FetchImage(ctx, "6f0c1c6e-0000-4000-8000-0000000000c4", img1, &bytes.Buffer{})
	forbidden("A reads an image for no instance", err)
	// A's instance's image is gone from the store (deleted).
	_, err = a.FetchImage(ctx, "6f0c1c6e-0000-4000-8000-0000000000c3", "0b6f2c3e-1d4a-4f1e-8b7a-00000000c009", &bytes.Buffer{})
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("A reads its instance's deleted image: %v, want not found", err)
	}
	// An agent posing as another host is refused by the bus.
	posing := &rpc.Store{Conn: conn(mustAgent(t, servers, "A")), Host: "B"}
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := posing.FetchImage(short, "6f0c1c6e-0000-4000-8000-0000000000c2", img1, &bytes.Buffer{}); err == nil {
		t.Errorf("A's read under B's subject: %v", err)
	}
}
