package computeapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"keel/internal/placement"
	"keel/internal/quota"
	"keel/internal/scheduler"
	"keel/internal/store"
)

// apiError is an error with its HTTP status, rendered in Nova's shape.
type apiError struct {
	status int
	msg    string
}

func (e *apiError) Error() string { return e.msg }

func badRequest(msg string) error { return &apiError{http.StatusBadRequest, msg} }
func notFound(msg string) error   { return &apiError{http.StatusNotFound, msg} }
func conflict(msg string) error   { return &apiError{http.StatusConflict, msg} }
func forbidden(action string) error {
	return &apiError{http.StatusForbidden, "Policy doesn't allow " + action + " to be performed."}
}

// errorKeys are Nova's fault names per status.
var errorKeys = map[int]string{
	400: "badRequest", 401: "unauthorized", 403: "forbidden", 404: "itemNotFound",
	405: "badMethod", 406: "notAcceptable", 409: "conflictingRequest", 413: "overLimit",
	415: "badMediaType", 500: "computeFault", 501: "notImplemented", 503: "serviceUnavailable",
}

// WriteError writes msg in Nova's error shape.
func WriteError(w http.ResponseWriter, status int, msg string) {
	key := errorKeys[status]
	if key == "" {
		key = "computeFault"
	}
	writeJSON(w, status, map[string]any{key: map[string]any{"code": status, "message": msg}})
}

// refusal is an error with which the conductor refuses a request,
// saying with which status the API answers it (the conductor's
// InvalidStateError 409, BadRequestError 400, ForbiddenError 403).
type refusal interface {
	error
	HTTPStatus() int
}

// statusOf maps an error from the backend to an HTTP status: typed API
// errors as they are, the conductor's refusals with their status, not
// found → 404, conflicts → 409, invalid input → 400, no valid host → 400,
// anything else 500 (with the message, never a bare 500).
func statusOf(err error) int {
	var ae *apiError
	var re refusal
	switch {
	case errors.As(err, &ae):
		return ae.status
	case errors.As(err, &re):
		return re.HTTPStatus()
	case errors.Is(err, quota.ErrExceeded):
		return http.StatusForbidden
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound
	case placement.IsConflict(err), errors.Is(err, store.ErrExists):
		return http.StatusConflict
	case placement.IsInvalid(err), scheduler.IsNoValidHost(err):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}
