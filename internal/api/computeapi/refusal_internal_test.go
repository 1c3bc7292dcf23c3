package computeapi

import (
	"fmt"
	"net/http"
	"testing"

	"keel/internal/conductor"
	"keel/internal/store"
)

// The conductor's refusals map to their statuses through the status they
// carry (refusal), wrapped or not, so the API needs no import of the
// conductor; other errors keep their mapping.
func TestStatusOfTheConductorsRefusals(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{&conductor.InvalidStateError{Msg: "Cannot 'stop' instance"}, http.StatusConflict},
		{fmt.Errorf("resize: %w", &conductor.InvalidStateError{Msg: "task_state migrating"}), http.StatusConflict},
		{&conductor.BadRequestError{Msg: "same host"}, http.StatusBadRequest},
		{fmt.Errorf("unlock: %w", &conductor.ForbiddenError{Msg: "Policy doesn't allow"}), http.StatusForbidden},
		{fmt.Errorf("instance x: %w", store.ErrNotFound), http.StatusNotFound},
		{fmt.Errorf("boom"), http.StatusInternalServerError},
	}
	for _, c := range cases {
		if got := statusOf(c.err); got != c.want {
			t.Errorf("statusOf(%v) = %d, want %d", c.err, got, c.want)
		}
	}
}
