package image

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"keel/internal/httpbody"
)

// memberStatuses are the statuses a member sets on its membership.
var memberStatuses = []string{MemberPending, MemberAccepted, MemberRejected}

// maxMembers is Glance's image_member_quota.
const maxMembers = 128

// errRefused stops a Store.Update whose change was refused; the answer
// is in the closure's status and message.
var errRefused = errors.New("refused")

// change applies fn to the image's record; fn refuses by returning a
// status and message, which are answered. It answers the store's errors
// too and returns the stored image and whether all went well.
func (a *API) change(w http.ResponseWriter, id string, fn func(*Image) (int, string)) (Image, bool) {
	var status int
	var msg string
	out, err := a.st.Update(id, func(im *Image) error {
		if status, msg = fn(im); status != 0 {
			return errRefused
		}
		return nil
	})
	switch {
	case errors.Is(err, errRefused):
		fail(w, status, msg)
	case errors.Is(err, ErrNotFound):
		fail(w, http.StatusNotFound, "No image found with ID "+id)
	case err != nil:
		fail(w, http.StatusInternalServerError, err.Error())
	default:
		return out, true
	}
	return Image{}, false
}

// addTag is PUT /v2/images/{id}/tags/{tag}: the owner (or an admin) tags
// the image; a tag it has already is fine.
func (a *API) addTag(w http.ResponseWriter, r *http.Request) {
	im, c, ok := a.find(w, r)
	if !ok || !owns(w, c, im, "modify_image") {
		return
	}
	tag := r.PathValue("tag")
	if len(tag) > maxTagLen {
		fail(w, http.StatusBadRequest, fmt.Sprintf("Tag %q is longer than %d characters.", tag, maxTagLen))
		return
	}
	if _, ok := a.change(w, im.ID, func(im *Image) (int, string) {
		im.Tags = sortedTags(append(im.Tags, tag))
		if len(im.Tags) > maxTags {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("Maximum number of tags exceeded (%d)", maxTags)
		}
		return 0, ""
	}); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}

// deleteTag is DELETE /v2/images/{id}/tags/{tag}; 404 if the image has
// no such tag.
func (a *API) deleteTag(w http.ResponseWriter, r *http.Request) {
	im, c, ok := a.find(w, r)
	if !ok || !owns(w, c, im, "modify_image") {
		return
	}
	tag := r.PathValue("tag")
	if _, ok := a.change(w, im.ID, func(im *Image) (int, string) {
		i := slices.Index(im.Tags, tag)
		if i < 0 {
			return http.StatusNotFound, "Tag " + tag + " not found on image " + im.ID + "."
		}
		im.Tags = slices.Delete(im.Tags, i, i+1)
		return 0, ""
	}); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}

// memberView is a membership as Glance shows it.
func memberView(imageID string, m Member) map[string]any {
	return map[string]any{
		"image_id": imageID, "member_id": m.ProjectID, "status": m.Status, "schema": "/v2/schemas/member",
		"created_at": m.CreatedAt.Format(time.RFC3339), "updated_at": m.UpdatedAt.Format(time.RFC3339),
	}
}

// sharedOnly answers 403 unless im is shared: only shared images have
// members.
func sharedOnly(w http.ResponseWriter, im Image) bool {
	if im.Visibility == "shared" {
		return true
	}
	fail(w, http.StatusForbidden, "Only shared images have members.")
	return false
}

// createMember is POST /v2/images/{id}/members {"member": project}: the
// owner (or an admin) shares a shared image with a project, whose
// membership starts pending.
func (a *API) createMember(w http.ResponseWriter, r *http.Request) {
	im, c, ok := a.find(w, r)
	if !ok || !owns(w, c, im, "add_member") || !sharedOnly(w, im) {
		return
	}
	var body struct {
		Member *string `json:"member"`
	}
	if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, &body); err != nil || body.Member == nil || *body.Member == "" || len(*body.Member) > 255 {
		fail(w, http.StatusBadRequest, "Provided object does not match schema 'member': 'member' is a required property (a project ID).")
		return
	}
	project := *body.Member
	now := time.Now().UTC().Truncate(time.Second)
	m := Member{ProjectID: project, Status: MemberPending, CreatedAt: now, UpdatedAt: now}
	if _, ok := a.change(w, im.ID, func(im *Image) (int, string) {
		if _, exists := im.Member(project); exists {
			return http.StatusConflict, "Member " + project + " already exists for image " + im.ID + "."
		}
		if len(im.Members) >= maxMembers {
			return http.StatusRequestEntityTooLarge, fmt.Sprintf("Maximum number of image members exceeded (%d)", maxMembers)
		}
		im.Members = append(im.Members, m)
		return 0, ""
	}); ok {
		writeJSON(w, http.StatusOK, memberView(im.ID, m))
	}
}

// listMembers is GET /v2/images/{id}/members: every member for the
// owner or an admin, a member's own membership for a member.
func (a *API) listMembers(w http.ResponseWriter, r *http.Request) {
	im, c, ok := a.find(w, r)
	if !ok || !sharedOnly(w, im) {
		return
	}
	out := []any{}
	for _, m := range im.Members {
		if c.Admin || im.Owner == c.ProjectID || m.ProjectID == c.ProjectID {
			out = append(out, memberView(im.ID, m))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"members": out, "schema": "/v2/schemas/members"})
}

// member finds the path's membership as c sees it (the owner and an
// admin see all, a member its own), answering 404 if none.
func (a *API) member(w http.ResponseWriter, r *http.Request) (Image, Caller, Member, bool) {
	im, c, ok := a.find(w, r)
	if !ok {
		return im, c, Member{}, false
	}
	id := r.PathValue("member")
	m, exists := im.Member(id)
	if !exists || !c.Admin && im.Owner != c.ProjectID && id != c.ProjectID {
		fail(w, http.StatusNotFound, "Member "+id+" not found for image "+im.ID+".")
		return im, c, Member{}, false
	}
	return im, c, m, true
}

// showMember is GET /v2/images/{id}/members/{member}.
func (a *API) showMember(w http.ResponseWriter, r *http.Request) {
	if im, _, m, ok := a.member(w, r); ok {
		writeJSON(w, http.StatusOK, memberView(im.ID, m))
	}
}

// updateMember is PUT /v2/images/{id}/members/{member} {"status": …}: the
// member itself (or an admin) accepts, rejects or resets its membership;
// the owner may not (403).
func (a *API) updateMember(w http.ResponseWriter, r *http.Request) {
	im, c, m, ok := a.member(w, r)
	if !ok {
		return
	}
	if !c.Admin && m.ProjectID != c.ProjectID {
		fail(w, http.StatusForbidden, "You are not permitted to modify 'status' on this image member.")
		return
	}
	var body struct {
		Status string `json:"status"`
	}
	if err := httpbody.DecodeJSON(r, httpbody.DefaultLimit, &body); err != nil || !slices.Contains(memberStatuses, body.Status) {
		fail(w, http.StatusBadRequest, "Provided object does not match schema 'member': 'status' must be one of pending, accepted, rejected.")
		return
	}
	var out Member
	if _, ok := a.change(w, im.ID, func(im *Image) (int, string) {
		i := slices.IndexFunc(im.Members, func(x Member) bool { return x.ProjectID == m.ProjectID })
		if i < 0 {
			return http.StatusNotFound, "Member " + m.ProjectID + " not found for image " + im.ID + "."
		}
		im.Members[i].Status, im.Members[i].UpdatedAt = body.Status, time.Now().UTC().Truncate(time.Second)
		out = im.Members[i]
		return 0, ""
	}); ok {
		writeJSON(w, http.StatusOK, memberView(im.ID, out))
	}
}

// deleteMember is DELETE /v2/images/{id}/members/{member}: the owner (or
// an admin) stops sharing the image with a project.
func (a *API) deleteMember(w http.ResponseWriter, r *http.Request) {
	im, c, m, ok := a.member(w, r)
	if !ok || !owns(w, c, im, "delete_member") {
		return
	}
	if _, ok := a.change(w, im.ID, func(im *Image) (int, string) {
		im.Members = slices.DeleteFunc(im.Members, func(x Member) bool { return x.ProjectID == m.ProjectID })
		return 0, ""
	}); ok {
		w.WriteHeader(http.StatusNoContent)
	}
}
