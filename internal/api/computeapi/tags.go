package computeapi

import (
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"keel/internal/placement"
	"keel/internal/records"
)

// Nova's limits on server tags.
const (
	maxTags      = 50
	maxTagLength = 60
)

func checkTag(tag string) error {
	if tag == "" || utf8.RuneCountInString(tag) > maxTagLength || strings.ContainsAny(tag, ",/") {
		return badRequest("Invalid tag '" + tag + "': tags have 1 to 60 characters, without ',' or '/'")
	}
	return nil
}

// modifyInstance applies fn to the latest copy of a server the caller may
// see until the versioned write lands (another writer, such as the
// conductor, may have moved it on meanwhile).
func (a *base) modifyInstance(r *http.Request, id string, fn func(*records.Instance) error) (records.Instance, error) {
	in, err := a.instance(r, id)
	if err != nil {
		return in, err
	}
	for range 5 {
		if err := fn(&in); err != nil {
			return in, err
		}
		in.UpdatedAt = a.clock.Now()
		updated, err := a.store.UpdateInstance(r.Context(), in)
		if err == nil {
			return updated, nil
		}
		if !placement.IsConflict(err) {
			return in, err
		}
		if in, err = a.instance(r, id); err != nil {
			return in, err
		}
	}
	return in, conflict("server " + id + " kept changing; try again")
}

// taggable refuses tag changes where Nova does: from 2.26 only, and not
// while a server is building or has a task in progress.
func taggable(r *http.Request, in *records.Instance) error {
	if in.VMState == records.VMBuilding || in.TaskState != records.TaskNone {
		return conflict("Cannot change the tags of server " + in.UUID + " while it is in vm_state " + string(in.VMState) + ", task_state " + string(in.TaskState))
	}
	return nil
}

func tagsSupported(r *http.Request) error {
	if !version(r).AtLeast(26) {
		return notFound("The resource could not be found.")
	}
	return nil
}

func tagList(in records.Instance) []string {
	if in.Tags == nil {
		return []string{}
	}
	return in.Tags
}

// listTags is GET /servers/{id}/tags.
func (a *serverTagsAPI) listTags(w http.ResponseWriter, r *http.Request) error {
	if err := tagsSupported(r); err != nil {
		return err
	}
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tags": tagList(in)})
	return nil
}

// replaceTags is PUT /servers/{id}/tags: the given list replaces them all.
func (a *serverTagsAPI) replaceTags(w http.ResponseWriter, r *http.Request) error {
	if err := tagsSupported(r); err != nil {
		return err
	}
	var body struct {
		Tags *[]string `json:"tags"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if body.Tags == nil {
		return badRequest("Invalid input for field/attribute tags: 'tags' is a required property")
	}
	var tags []string
	for _, t := range *body.Tags {
		if err := checkTag(t); err != nil {
			return err
		}
		if !slices.Contains(tags, t) {
			tags = append(tags, t)
		}
	}
	if len(tags) > maxTags {
		return badRequest("Too many tags: at most 50")
	}
	in, err := a.modifyInstance(r, r.PathValue("id"), func(in *records.Instance) error {
		if err := taggable(r, in); err != nil {
			return err
		}
		in.Tags = tags
		return nil
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"tags": tagList(in)})
	return nil
}

// deleteTags is DELETE /servers/{id}/tags.
func (a *serverTagsAPI) deleteTags(w http.ResponseWriter, r *http.Request) error {
	if err := tagsSupported(r); err != nil {
		return err
	}
	if _, err := a.modifyInstance(r, r.PathValue("id"), func(in *records.Instance) error {
		if err := taggable(r, in); err != nil {
			return err
		}
		in.Tags = nil
		return nil
	}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkTagExists is GET /servers/{id}/tags/{tag}: 204 if the server has
// it, 404 if not.
func (a *serverTagsAPI) checkTagExists(w http.ResponseWriter, r *http.Request) error {
	if err := tagsSupported(r); err != nil {
		return err
	}
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if !slices.Contains(in.Tags, r.PathValue("tag")) {
		return notFoundf("Server %s has no tag %s.", in.UUID, r.PathValue("tag"))
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// addTag is PUT /servers/{id}/tags/{tag}: 201 with a Location when added,
// 204 when the server had it already.
func (a *serverTagsAPI) addTag(w http.ResponseWriter, r *http.Request) error {
	if err := tagsSupported(r); err != nil {
		return err
	}
	tag := r.PathValue("tag")
	if err := checkTag(tag); err != nil {
		return err
	}
	added := false
	in, err := a.modifyInstance(r, r.PathValue("id"), func(in *records.Instance) error {
		if err := taggable(r, in); err != nil {
			return err
		}
		added = !slices.Contains(in.Tags, tag)
		if added {
			if len(in.Tags) >= maxTags {
				return badRequest("Too many tags: at most 50")
			}
			in.Tags = append(slices.Clone(in.Tags), tag)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !added {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	w.Header().Set("Location", a.baseURL+"/v2.1/servers/"+in.UUID+"/tags/"+tag)
	w.WriteHeader(http.StatusCreated)
	return nil
}

// deleteTag is DELETE /servers/{id}/tags/{tag}.
func (a *serverTagsAPI) deleteTag(w http.ResponseWriter, r *http.Request) error {
	if err := tagsSupported(r); err != nil {
		return err
	}
	tag := r.PathValue("tag")
	if _, err := a.modifyInstance(r, r.PathValue("id"), func(in *records.Instance) error {
		if err := taggable(r, in); err != nil {
			return err
		}
		i := slices.Index(in.Tags, tag)
		if i < 0 {
			return notFoundf("Server %s has no tag %s.", in.UUID, tag)
		}
		in.Tags = slices.Delete(slices.Clone(in.Tags), i, i+1)
		return nil
	}); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
