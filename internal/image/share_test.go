package image_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/images"
	"github.com/gophercloud/gophercloud/v2/openstack/image/v2/members"
)

// do sends a request as a caller (token) with a content type and body;
// it returns the status and the body.
func (c *cloud) do(t *testing.T, token, method, path, ctype, body, accept string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, c.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Auth-Token", token)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

const patchType = "application/openstack-images-v2.1-json-patch"

// TestGophercloudImageUpdate: PATCH as Glance — name, protected, min_disk,
// tags and properties changed in one patch; add replaces a property,
// replace and remove need it (409); read-only, reserved, removing a base
// attribute, a format of an active image, public by a member are 403;
// another project 404 (it does not see it) and a member 403 (it sees
// it); the wrong media type 415; a refused patch changes nothing; and the
// element paths under /tags openstacksdk sends.
func TestGophercloudImageUpdate(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 1<<20)
	demo := c.client("demo")
	im, err := images.Create(ctx, demo, images.CreateOpts{Name: "before", DiskFormat: "raw", ContainerFormat: "bare",
		Properties: map[string]string{"os_distro": "cirros", "gone": "x"}}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	got, err := images.Update(ctx, demo, im.ID, images.UpdateOpts{
		images.ReplaceImageName{NewName: "after"},
		images.ReplaceImageProtected{NewProtected: true},
		images.ReplaceImageMinDisk{NewMinDisk: 2},
		images.ReplaceImageTags{NewTags: []string{"z", "y"}},
		images.UpdateImageProperty{Op: images.AddOp, Name: "os_distro", Value: "debian"},
		images.UpdateImageProperty{Op: images.AddOp, Name: "hw_disk_bus", Value: "virtio"},
		images.UpdateImageProperty{Op: images.RemoveOp, Name: "gone"},
	}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "after" || !got.Protected || got.MinDiskGigabytes != 2 || !slices.Equal(got.Tags, []string{"y", "z"}) ||
		got.Properties["os_distro"] != "debian" || got.Properties["hw_disk_bus"] != "virtio" || got.Properties["gone"] != nil {
		t.Fatalf("after the patch: %+v", got)
	}
	refused := []struct {
		name, token, body string
		status            int
	}{
		{"replace a missing property", "demo", `[{"op": "replace", "path": "/nope", "value": "1"}]`, 409},
		{"remove a missing property", "demo", `[{"op": "remove", "path": "/nope"}]`, 409},
		{"read-only status", "demo", `[{"op": "replace", "path": "/status", "value": "active"}]`, 403},
		{"read-only id", "demo", `[{"op": "replace", "path": "/id", "value": "x"}]`, 403},
		{"reserved", "demo", `[{"op": "add", "path": "/deleted", "value": "1"}]`, 403},
		{"remove a base attribute", "demo", `[{"op": "remove", "path": "/name"}]`, 403},
		{"public by a member", "demo", `[{"op": "replace", "path": "/visibility", "value": "public"}]`, 403},
		{"another owner by a member", "demo", `[{"op": "replace", "path": "/owner", "value": "p-alt"}]`, 403},
		{"a bad visibility", "demo", `[{"op": "replace", "path": "/visibility", "value": "everyone"}]`, 400},
		{"a number property", "demo", `[{"op": "add", "path": "/n", "value": 1}]`, 400},
		{"an unknown op", "demo", `[{"op": "move", "path": "/name", "value": "x"}]`, 400},
		{"no value", "demo", `[{"op": "add", "path": "/name"}]`, 400},
		{"a nested path", "demo", `[{"op": "add", "path": "/a/b", "value": "x"}]`, 400},
		{"a tag index out of range", "demo", `[{"op": "remove", "path": "/tags/5"}]`, 400},
		// The name changes, then the remove is refused: nothing changes.
		{"half a patch", "demo", `[{"op": "replace", "path": "/name", "value": "half"}, {"op": "remove", "path": "/nope"}]`, 409},
		{"another project", "alt", `[{"op": "replace", "path": "/name", "value": "x"}]`, 404},
	}
	for _, tc := range refused {
		if st, body := c.do(t, tc.token, "PATCH", "/image/v2/images/"+im.ID, patchType, tc.body, ""); st != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, st, body, tc.status)
		}
	}
	if st, _ := c.do(t, "demo", "PATCH", "/image/v2/images/"+im.ID, "application/json", `[]`, ""); st != http.StatusUnsupportedMediaType {
		t.Errorf("a PATCH as application/json: %d, want 415", st)
	}
	// openstacksdk's diff of the tags (image set --tag), and Glance's 2.0
	// form.
	st, body := c.do(t, "demo", "PATCH", "/image/v2/images/"+im.ID, patchType,
		`[{"op": "add", "path": "/tags/0", "value": "a"}, {"op": "add", "path": "/tags/-", "value": "b~/c"}, {"op": "remove", "path": "/tags/1"}]`, "")
	if st != http.StatusOK {
		t.Fatalf("tag elements: %d %s", st, body)
	}
	st, body = c.do(t, "demo", "PATCH", "/image/v2/images/"+im.ID, "application/openstack-images-v2.0-json-patch",
		`[{"replace": "/min_ram", "value": 64}, {"add": "/x~1y", "value": "1"}]`, "")
	if st != http.StatusOK {
		t.Fatalf("a 2.0 patch: %d %s", st, body)
	}
	got, err = images.Get(ctx, demo, im.ID).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "after" || !slices.Equal(got.Tags, []string{"a", "b~/c", "z"}) || got.MinRAMMegabytes != 64 || got.Properties["x/y"] != "1" {
		t.Errorf("after the refused patches and the element ones: %+v", got)
	}

	// A member sees the image but may not change it; once active the
	// formats are fixed.
	if _, err := images.Update(ctx, demo, im.ID, images.UpdateOpts{images.ReplaceImageProtected{NewProtected: false}}).Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := members.Create(ctx, demo, im.ID, "p-alt").Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := images.Update(ctx, c.client("alt"), im.ID, images.UpdateOpts{images.ReplaceImageName{NewName: "mine"}}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Errorf("a member's patch: %v, want 403", err)
	}
	if st, body := c.do(t, "demo", "PATCH", "/image/v2/images/"+im.ID, patchType, `[{"op": "replace", "path": "/disk_format", "value": "qcow2"}]`, ""); st != http.StatusOK {
		t.Errorf("disk_format of a queued image: %d %s", st, body)
	}
	if _, err := c.st.Upload(im.ID, strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.do(t, "demo", "PATCH", "/image/v2/images/"+im.ID, patchType, `[{"op": "replace", "path": "/disk_format", "value": "raw"}]`, ""); st != http.StatusForbidden {
		t.Errorf("disk_format of an active image: %d, want 403", st)
	}
	// Any other list parameter filters on the property of that name, as
	// Glance's (Tempest lists a server's backups so).
	for q, want := range map[string]bool{"hw_disk_bus=virtio": true, "hw_disk_bus=ide": false, "x%2Fy=1&os_distro=debian": true, "nope=1": false} {
		st, body := c.do(t, "demo", "GET", "/image/v2/images?"+q, "", "", "")
		if st != http.StatusOK || strings.Contains(body, im.ID) != want {
			t.Errorf("list ?%s: %d, lists the image %v, want %v", q, st, !want, want)
		}
	}
	admin := c.client("admin")
	if got, err := images.Update(ctx, admin, im.ID, images.UpdateOpts{images.UpdateVisibility{Visibility: images.ImageVisibilityPublic}}).Extract(); err != nil || got.Visibility != images.ImageVisibilityPublic {
		t.Errorf("public by an admin: %+v %v", got, err)
	}
}

// TestGophercloudTagsAndMembers: tags put and deleted one by one; a
// shared image's members as Glance has them — the owner adds one
// (pending), the member sees the image (show) but lists it only once
// accepted (or with member_status), sees its own membership only, sets
// its status (the owner may not); another project sees nothing; the
// owner removes the member, who then no longer sees it; a private image
// has no members.
func TestGophercloudTagsAndMembers(t *testing.T) {
	ctx := context.Background()
	c := newCloud(t, 1<<20)
	demo, alt, admin := c.client("demo"), c.client("alt"), c.client("admin")
	im, err := images.Create(ctx, demo, images.CreateOpts{Name: "shared", DiskFormat: "raw", ContainerFormat: "bare"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	for _, tag := range []string{"web", "db", "web"} {
		if st, body := c.do(t, "demo", "PUT", "/image/v2/images/"+im.ID+"/tags/"+tag, "", "", ""); st != http.StatusNoContent {
			t.Fatalf("tag %s: %d %s", tag, st, body)
		}
	}
	if st, _ := c.do(t, "demo", "DELETE", "/image/v2/images/"+im.ID+"/tags/db", "", "", ""); st != http.StatusNoContent {
		t.Errorf("untag db: %d", st)
	}
	if st, _ := c.do(t, "demo", "DELETE", "/image/v2/images/"+im.ID+"/tags/db", "", "", ""); st != http.StatusNotFound {
		t.Errorf("untag db again: %d, want 404", st)
	}
	if got, err := images.Get(ctx, demo, im.ID).Extract(); err != nil || !slices.Equal(got.Tags, []string{"web"}) {
		t.Errorf("tags: %+v %v", got, err)
	}

	listed := func(sc *gophercloud.ServiceClient, opts images.ListOpts) bool {
		t.Helper()
		pages, err := images.List(sc, opts).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ims, err := images.ExtractImages(pages)
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ims, func(x images.Image) bool { return x.ID == im.ID })
	}
	if _, err := images.Get(ctx, alt, im.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Fatalf("alt shows the image before it is a member: %v", err)
	}
	if _, err := members.Create(ctx, alt, im.ID, "p-alt").Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("alt adds itself: %v, want 404", err)
	}
	m, err := members.Create(ctx, demo, im.ID, "p-alt").Extract()
	if err != nil || m.Status != "pending" || m.MemberID != "p-alt" || m.ImageID != im.ID {
		t.Fatalf("member create: %+v %v", m, err)
	}
	if _, err := members.Create(ctx, demo, im.ID, "p-alt").Extract(); !gophercloud.ResponseCodeIs(err, http.StatusConflict) {
		t.Errorf("the same member twice: %v, want 409", err)
	}
	if _, err := members.Create(ctx, demo, im.ID, "p-other").Extract(); err != nil {
		t.Fatal(err)
	}
	if _, err := images.Get(ctx, alt, im.ID).Extract(); err != nil {
		t.Errorf("a pending member's show: %v", err)
	}
	if listed(alt, images.ListOpts{}) {
		t.Error("a pending member lists the image")
	}
	if !listed(alt, images.ListOpts{MemberStatus: images.ImageMemberStatusPending}) {
		t.Error("member_status=pending does not list it")
	}
	memberIDs := func(sc *gophercloud.ServiceClient) []string {
		t.Helper()
		pages, err := members.List(sc, im.ID).AllPages(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := members.ExtractMembers(pages)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.MemberID)
		}
		slices.Sort(out)
		return out
	}
	if got := memberIDs(demo); !slices.Equal(got, []string{"p-alt", "p-other"}) {
		t.Errorf("the owner's member list: %v", got)
	}
	if got := memberIDs(alt); !slices.Equal(got, []string{"p-alt"}) {
		t.Errorf("a member's member list: %v, want its own", got)
	}
	if _, err := members.Get(ctx, alt, im.ID, "p-other").Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("a member shows another: %v, want 404", err)
	}
	if _, err := members.Update(ctx, demo, im.ID, "p-alt", members.UpdateOpts{Status: "accepted"}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Errorf("the owner accepts for the member: %v, want 403", err)
	}
	if _, err := members.Update(ctx, alt, im.ID, "p-alt", members.UpdateOpts{Status: "maybe"}).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusBadRequest) {
		t.Errorf("status maybe: %v, want 400", err)
	}
	if m, err := members.Update(ctx, alt, im.ID, "p-alt", members.UpdateOpts{Status: "accepted"}).Extract(); err != nil || m.Status != "accepted" {
		t.Fatalf("accept: %+v %v", m, err)
	}
	if !listed(alt, images.ListOpts{}) || !listed(alt, images.ListOpts{Visibility: images.ImageVisibilityShared}) {
		t.Error("an accepted member does not list the image")
	}
	if err := members.Delete(ctx, alt, im.ID, "p-alt").ExtractErr(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Errorf("a member deletes its membership: %v, want 403", err)
	}
	if err := members.Delete(ctx, demo, im.ID, "p-alt").ExtractErr(); err != nil {
		t.Fatal(err)
	}
	if _, err := images.Get(ctx, alt, im.ID).Extract(); !gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
		t.Errorf("a removed member shows the image: %v, want 404", err)
	}
	if got := memberIDs(admin); !slices.Equal(got, []string{"p-other"}) {
		t.Errorf("the admin's member list: %v", got)
	}
	private := images.ImageVisibilityPrivate
	priv, err := images.Create(ctx, demo, images.CreateOpts{Name: "private", Visibility: &private}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := members.Create(ctx, demo, priv.ID, "p-alt").Extract(); !gophercloud.ResponseCodeIs(err, http.StatusForbidden) {
		t.Errorf("a member of a private image: %v, want 403", err)
	}
}

// TestSchemasAndErrors: the four schemas clients read, and errors in
// Glance's JSON form to a client that accepts JSON, its plain form
// otherwise.
func TestSchemasAndErrors(t *testing.T) {
	c := newCloud(t, 1<<20)
	for _, name := range []string{"image", "images", "member", "members"} {
		st, body := c.do(t, "demo", "GET", "/image/v2/schemas/"+name, "", "", "application/json")
		var s struct {
			Name       string                    `json:"name"`
			Properties map[string]map[string]any `json:"properties"`
		}
		if st != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil || s.Name != name {
			t.Errorf("schema %s: %d %s", name, st, body)
		}
		if name == "image" && (s.Properties["status"]["readOnly"] != true || s.Properties["name"]["maxLength"] != 255.0) {
			t.Errorf("the image schema's status and name: %v %v", s.Properties["status"], s.Properties["name"])
		}
	}
	if st, _ := c.do(t, "demo", "GET", "/image/v2/schemas/flavor", "", "", ""); st != http.StatusNotFound {
		t.Errorf("an unknown schema: %d", st)
	}
	missing := "/image/v2/images/00000000-0000-4000-8000-000000000000"
	st, body := c.do(t, "demo", "GET", missing, "", "", "application/json")
	var e struct{ Message, Code, Title string }
	if st != http.StatusNotFound || json.Unmarshal([]byte(body), &e) != nil || e.Code != "404 Not Found" || e.Title != "Not Found" ||
		!strings.Contains(e.Message, "No image found with ID 00000000-0000-4000-8000-000000000000") {
		t.Errorf("a JSON 404: %d %s", st, body)
	}
	st, body = c.do(t, "demo", "GET", missing, "", "", "")
	if st != http.StatusNotFound || !strings.HasPrefix(body, "404 Not Found\n\n") || !strings.Contains(body, "No image found") {
		t.Errorf("a plain 404: %d %q", st, body)
	}
}
