package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"keel/internal/testdisk"
)

// uploadImage creates an image (Glance v2) and uploads the file at path
// as its data; it returns the image's ID.
func (c *cloud) uploadImage(name, diskFormat, path string) string {
	c.t.Helper()
	var im struct{ ID string }
	status, data := c.send("POST", "/image/v2/images", "", map[string]any{"name": name, "disk_format": diskFormat, "container_format": "bare"})
	if status != 201 || json.Unmarshal(data, &im) != nil {
		c.t.Fatalf("creating image %s: %d %s", name, status, data)
	}
	body, err := os.ReadFile(path)
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "PUT", c.url+"/image/v2/images/"+im.ID+"/file", bytes.NewReader(body))
	req.Header.Set("X-Auth-Token", c.login())
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("uploading image %s: %v", name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 {
		c.t.Fatalf("uploading image %s: %d", name, resp.StatusCode)
	}
	return im.ID
}

// bootImage asks for a server booting image and returns its ID.
func (c *cloud) bootImage(name, flavor, image string) string {
	c.t.Helper()
	var out struct {
		Server struct{ ID string } `json:"server"`
	}
	body := map[string]any{"server": map[string]any{"name": name, "flavorRef": flavor, "imageRef": image, "networks": "none"}}
	if st := c.call("POST", "/compute/v2.1/servers", body, &out); st != 202 {
		c.t.Fatalf("boot %s: %d", name, st)
	}
	return out.Server.ID
}

// TestQEMUBootsUploadedImage uploads keel's guest as a qcow2 image
// through the image API and boots it on the QEMU driver: the agent reads
// the image from the servers over the bus into its host's cache
// (_base/<id>, raw), the guest's disk is a qcow2 overlay on it, and the
// guest runs. A qcow2 image that names a backing file is refused: the
// server goes to ERROR with a fault that says so, and the host's cache
// keeps nothing of it.
func TestQEMUBootsUploadedImage(t *testing.T) {
	c := qemuCloud(t)
	c.startAgent("h1")
	work, raw, qcow := testdisk.GuestImage(t)
	img := c.uploadImage("guest", "qcow2", qcow)
	id := c.bootImage("vm", "q64", img)
	c.waitFor("server vm ACTIVE", 60*time.Second, func() bool {
		s := c.server_(id)
		if s["status"] == "ERROR" {
			t.Fatalf("the server failed: %v", s["fault"])
		}
		return s["status"] == "ACTIVE"
	})
	c.rising("h1", id, 0)
	qdir := filepath.Join(c.dataDir, "agents", "h1", "qemu")
	if info := testdisk.Info(t, filepath.Join(qdir, id, "disk.img")); info.Format != "qcow2" || info.BackingFilename != filepath.Join("..", "_base", img) {
		t.Fatalf("the guest's disk is %+v, want a qcow2 overlay on ../_base/%s", info, img)
	}
	if _, err := os.Stat(filepath.Join(qdir, "_base", img)); err != nil {
		t.Fatalf("the host's copy of the image: %v", err)
	}

	backed := filepath.Join(work, "backed.qcow2")
	testdisk.QemuImg(t, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", raw, backed)
	bad := c.uploadImage("backed", "qcow2", backed)
	bid := c.bootImage("bad", "q64", bad)
	var fault string
	c.waitFor("server bad ERROR", 60*time.Second, func() bool {
		s := c.server_(bid)
		if s["status"] == "ACTIVE" {
			t.Fatal("a server booted a qcow2 image that names a backing file")
		}
		fault = fmt.Sprint(s["fault"])
		return s["status"] == "ERROR"
	})
	t.Logf("fault: %s", fault)
	if !strings.Contains(fault, "names a backing file") {
		t.Fatalf("the fault does not say the image names a backing file: %s", fault)
	}
	if _, err := os.Stat(filepath.Join(qdir, "_base", bad)); err == nil {
		t.Fatal("the refused image is in the host's cache")
	}
}

// TestQEMUSnapshotBootsAgain snapshots, through the compute API, a QEMU
// guest booted from an uploaded image: createImage answers with the
// image's ID while the server has a task, the host captures the disk
// (the guest paused meanwhile) and the servers store it over the bus
// until the image is active (a whole qcow2); the server runs on, and a
// second server booted from the snapshot runs. Before, a snapshot held
// the base image's data, not the guest's disk.
func TestQEMUSnapshotBootsAgain(t *testing.T) {
	c := qemuCloud(t)
	c.startAgent("h1")
	_, _, qcow := testdisk.GuestImage(t)
	img := c.uploadImage("guest", "qcow2", qcow)
	active := func(name, id string) {
		c.waitFor("server "+name+" ACTIVE", 60*time.Second, func() bool {
			s := c.server_(id)
			if s["status"] == "ERROR" {
				t.Fatalf("server %s failed: %v", name, s["fault"])
			}
			return s["status"] == "ACTIVE" && s["OS-EXT-STS:task_state"] == nil
		})
	}
	id := c.bootImage("vm", "q64", img)
	active("vm", id)
	hb := c.rising("h1", id, 0)
	status, data := c.send("POST", "/compute/v2.1/servers/"+id+"/action", "compute 2.45", map[string]any{"createImage": map[string]any{"name": "snap"}})
	var out struct {
		ImageID string `json:"image_id"`
	}
	if status != 202 || json.Unmarshal(data, &out) != nil || out.ImageID == "" {
		t.Fatalf("createImage: %d %s", status, data)
	}
	var im map[string]any
	c.waitFor("the snapshot active", 60*time.Second, func() bool {
		st, data := c.send("GET", "/image/v2/images/"+out.ImageID, "", nil)
		if st != 200 || json.Unmarshal(data, &im) != nil {
			t.Fatalf("the snapshot: %d %s", st, data)
		}
		return im["status"] == "active"
	})
	if im["disk_format"] != "qcow2" || im["image_type"] != "snapshot" {
		t.Errorf("the snapshot: %v", im)
	}
	active("vm", id)
	c.rising("h1", id, hb)
	again := c.bootImage("again", "q64", out.ImageID)
	active("again", again)
	c.rising("h1", again, 0)
}

// TestQEMUUnshelvedGuestColdMigrates shelves (offloads) a QEMU guest
// booted from an uploaded image, unshelves it — booted from its shelve's
// snapshot, which is then deleted — and cold-migrates it to the other
// host, where it runs (its heartbeat rises): the unshelve rebased its
// disk onto the image it was booted from, which the destination fetches.
// Before, the destination could not open the moved disk's backing file
// (the deleted snapshot).
func TestQEMUUnshelvedGuestColdMigrates(t *testing.T) {
	c := qemuCloud(t, "DEFAULT.shelved_offload_time=0")
	c.startAgent("h1")
	c.startAgent("h2")
	_, _, qcow := testdisk.GuestImage(t)
	img := c.uploadImage("guest", "qcow2", qcow)
	id := c.bootImage("vm", "q64", img)
	settled := func(status string) string {
		var s map[string]any
		c.waitFor("server "+status, 90*time.Second, func() bool {
			s = c.server_(id)
			if s["status"] == "ERROR" {
				t.Fatalf("server failed: %v", s["fault"])
			}
			return s["status"] == status && s["OS-EXT-STS:task_state"] == nil
		})
		return c.hostOf(id)
	}
	settled("ACTIVE")
	if st := c.action(id, map[string]any{"shelve": nil}, "compute 2.87"); st != 202 {
		t.Fatalf("shelve: %d", st)
	}
	settled("SHELVED_OFFLOADED")
	if st := c.action(id, map[string]any{"unshelve": nil}, "compute 2.87"); st != 202 {
		t.Fatalf("unshelve: %d", st)
	}
	from := settled("ACTIVE")
	c.rising(from, id, 0)
	if st := c.action(id, map[string]any{"migrate": nil}, "compute 2.87"); st != 202 {
		t.Fatalf("migrate: %d", st)
	}
	settled("VERIFY_RESIZE")
	if st := c.action(id, map[string]any{"confirmResize": nil}, "compute 2.87"); st != 204 {
		t.Fatalf("confirmResize: %d", st)
	}
	to := settled("ACTIVE")
	if to == from {
		t.Fatalf("the cold migration left the server on %s", from)
	}
	c.rising(to, id, 0)
}
