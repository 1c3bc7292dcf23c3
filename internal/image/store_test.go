package image_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"keel/internal/image"
	"keel/internal/testenv"
)

// TestSweepAfterCrash: what a server that crashed mid-upload leaves — an
// image saving with its partial file, one saving whose data was renamed
// into place but never recorded, a stray partial file of a queued image,
// an old temporary record — is cleared by Sweep (the images queued again,
// the files gone), while an upload in progress (holding its file's lock,
// as on another replica sharing the directory) and a fresh temporary file
// are left alone; an upload of an image left saving reclaims it without a
// sweep.
func TestSweepAfterCrash(t *testing.T) {
	dir := t.TempDir()
	st, err := image.NewStore(dir, 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) string {
		t.Helper()
		im, err := st.Create(image.Image{ID: newID(t), Name: name, DiskFormat: "raw", ContainerFormat: "bare"})
		if err != nil {
			t.Fatal(err)
		}
		return im.ID
	}
	saving := func(id string) {
		t.Helper()
		if _, err := st.Update(id, func(im *image.Image) error { im.Status = image.StatusSaving; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte("partial"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	partial, unrecorded, stray, live := create("partial"), create("unrecorded"), create("stray"), create("live")
	saving(partial)
	write(partial + ".part")
	saving(unrecorded)
	write(unrecorded)
	write(stray + ".part")
	old, fresh := "."+stray+".json.123", "."+partial+".json.456"
	write(old)
	write(fresh)
	if err := os.Chtimes(filepath.Join(dir, old), time.Now().Add(-time.Hour), time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	// A live upload: blocked reading its body until the end of the test.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { _, err := st.Upload(live, pr); done <- err }()
	t.Cleanup(func() { pw.Close() })
	waitFor(t, func() bool {
		im, err := st.Get(live)
		return err == nil && im.Status == image.StatusSaving
	})
	if _, err := pw.Write([]byte("some")); err != nil {
		t.Fatal(err)
	}

	swept, err := st.Sweep()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(swept.Requeued)
	want := []string{partial, unrecorded}
	slices.Sort(want)
	if !slices.Equal(swept.Requeued, want) {
		t.Errorf("requeued %v, want %v", swept.Requeued, want)
	}
	slices.Sort(swept.Removed)
	if !slices.Equal(swept.Removed, []string{old, stray + ".part"}) {
		t.Errorf("removed %v, want the stray partial file and the old temporary record", swept.Removed)
	}
	for _, id := range []string{partial, unrecorded, stray} {
		if im, err := st.Get(id); err != nil || im.Status != image.StatusQueued {
			t.Errorf("%s after the sweep: %+v %v, want queued", id, im, err)
		}
		for _, ext := range []string{"", ".part"} {
			if _, err := os.Stat(filepath.Join(dir, id+ext)); err == nil {
				t.Errorf("%s%s left behind", id, ext)
			}
		}
	}
	if im, err := st.Get(live); err != nil || im.Status != image.StatusSaving {
		t.Errorf("the live upload's image after the sweep: %+v %v, want saving", im, err)
	}
	if _, err := os.Stat(filepath.Join(dir, live+".part")); err != nil {
		t.Errorf("the live upload's file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, fresh)); err != nil {
		t.Errorf("the fresh temporary file: %v", err)
	}
	// The live upload finishes and is active; its data is all it got.
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if im, err := st.Get(live); err != nil || im.Status != image.StatusActive || *im.Size != 4 {
		t.Errorf("the live upload's image: %+v %v", im, err)
	}

	// No sweep: an upload of an image a crash left saving takes it back.
	again := create("again")
	saving(again)
	write(again + ".part")
	if im, err := st.Upload(again, strings.NewReader("fresh data")); err != nil || im.Status != image.StatusActive || *im.Size != 10 {
		t.Errorf("an upload of an image left saving: %+v %v", im, err)
	}
}

// newID is a fresh image ID.
func newID(t *testing.T) string {
	t.Helper()
	return uuid.NewString()
}

// waitFor polls cond until it holds, bounded by the test's context.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	ctx := testenv.Context(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatal("the condition never held")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestVirtualSize: Glance's virtual_size — null until the data is
// uploaded; the data's size for raw; the disk's size a qcow2 image
// (made by qemu-img) names in its header; null for a format keel does
// not read and for qcow2 data that is not qcow2.
func TestVirtualSize(t *testing.T) {
	testenv.External(t, "qemu-img (Debian's qemu-utils)")
	ctx := testenv.Context(t)
	dir := t.TempDir()
	qcow := filepath.Join(dir, "disk.qcow2")
	if out, err := exec.CommandContext(ctx, "qemu-img", "create", "-f", "qcow2", qcow, "3G").CombinedOutput(); err != nil {
		t.Fatalf("qemu-img create: %v: %s", err, out)
	}
	qcowData, err := os.ReadFile(qcow)
	if err != nil {
		t.Fatal(err)
	}
	st, err := image.NewStore(filepath.Join(dir, "images"), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw := bytes.Repeat([]byte{1}, 5000)
	for _, c := range []struct {
		format string
		data   []byte
		want   any
	}{
		{"raw", raw, float64(5000)},
		{"qcow2", qcowData, float64(3 << 30)},
		{"qcow2", raw, nil},
		{"vmdk", raw, nil},
	} {
		im, err := st.Create(image.Image{ID: uuid.NewString(), Name: c.format, DiskFormat: c.format, ContainerFormat: "bare", Visibility: "private", Owner: "p"})
		if err != nil {
			t.Fatal(err)
		}
		if v := shownVirtualSize(t, st, im.ID); v != nil {
			t.Errorf("%s: virtual_size %v before the upload, want null", c.format, v)
		}
		if _, err := st.Upload(im.ID, bytes.NewReader(c.data)); err != nil {
			t.Fatal(err)
		}
		if v := shownVirtualSize(t, st, im.ID); v != c.want {
			t.Errorf("%s data of %d bytes: virtual_size %v, want %v", c.format, len(c.data), v, c.want)
		}
	}
}

// shownVirtualSize is the virtual_size Glance's API shows for an image.
func shownVirtualSize(t *testing.T, st *image.Store, id string) any {
	t.Helper()
	api := image.New(st, func(*http.Request) (image.Caller, bool) { return image.Caller{ProjectID: "p"}, true })
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/image/v2/images/"+id, nil))
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != http.StatusOK {
		t.Fatalf("GET image %s: %d %s", id, rec.Code, rec.Body)
	}
	return v["virtual_size"]
}
