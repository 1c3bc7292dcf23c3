package image

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// explanations are the general texts Glance's web framework puts before
// an error's detail, by status.
var explanations = map[int]string{
	http.StatusBadRequest:            "The server could not comply with the request since it is either malformed or otherwise incorrect.",
	http.StatusUnauthorized:          "This server could not verify that you are authorized to access the document you requested.",
	http.StatusForbidden:             "Access was denied to this resource.",
	http.StatusNotFound:              "The resource could not be found.",
	http.StatusConflict:              "There was a conflict when trying to complete your request.",
	http.StatusRequestEntityTooLarge: "The request is larger than the server is willing or able to process.",
	http.StatusUnsupportedMediaType:  "The request media type is not supported by this server.",
	http.StatusInternalServerError:   "The server has either erred or is incapable of performing the requested operation.",
}

// wantsJSON reports whether an error answer to r is JSON: when the
// request's Accept names application/json before (or without) text/html,
// as openstacksdk's requests do. Otherwise it is plain text.
func wantsJSON(r *http.Request) bool {
	accept := strings.Join(r.Header.Values("Accept"), ",")
	j, h := strings.Index(accept, "application/json"), strings.Index(accept, "text/html")
	return j >= 0 && (h < 0 || j < h)
}

// errorWriter carries, for fail, how the request wants its errors.
type errorWriter struct {
	http.ResponseWriter
	json bool
}

// Unwrap gives http.ResponseController the connection's writer.
func (w *errorWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// fail answers an error as Glance does: JSON {"message", "code",
// "title"} to a client that accepts JSON, else the plain text form (the
// status line, the explanation, the detail). The message carries the
// detail after the explanation, as Glance's.
func fail(w http.ResponseWriter, status int, msg string) {
	title := http.StatusText(status)
	code := fmt.Sprintf("%d %s", status, title)
	expl := explanations[status]
	if ew, ok := w.(*errorWriter); ok && ew.json {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{
			"message": expl + "<br /><br />\n" + msg + "\n\n", "code": code, "title": title,
		})
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, "%s\n\n%s\n\n%s\n", code, expl, msg)
}
