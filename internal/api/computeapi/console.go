package computeapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"keel/internal/compute"
	"keel/internal/records"
	"keel/internal/store"
)

// consoleLengthPattern is the form os-getConsoleOutput's length takes as
// a string (Nova's schema).
var consoleLengthPattern = regexp.MustCompile(`^-?[0-9]+$`)

// consoleLength reads os-getConsoleOutput's body as Nova's schema has it:
// an object whose only property is length, an integer of at least -1, a
// string of digits, or null. It returns how many lines to keep from the
// end, or -1 for all.
func consoleLength(raw jsonRaw) (int, error) {
	var args map[string]jsonRaw
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return 0, badRequest("Invalid input for field/attribute os-getConsoleOutput. Value: " + truncate(string(raw), 64) + ". " + pyRepr(raw) + " is not of type 'object'")
	}
	for k := range args {
		if k != "length" {
			return 0, badRequest("Invalid input for field/attribute os-getConsoleOutput. Value: " + truncate(string(raw), 64) + ". Additional properties are not allowed ('" + k + "' was unexpected)")
		}
	}
	lr, ok := args["length"]
	if !ok || string(lr) == "null" {
		return -1, nil
	}
	bad := func(why string) error {
		return badRequest("Invalid input for field/attribute length. Value: " + truncate(strings.Trim(string(lr), `"`), 64) + ". " + why)
	}
	var s string
	if json.Unmarshal(lr, &s) == nil {
		if !consoleLengthPattern.MatchString(s) {
			return 0, bad("'" + s + "' does not match '^-?[0-9]+$'")
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			return 0, bad("'" + s + "' is out of range")
		}
		return max(n, -1), nil
	}
	var f float64
	if json.Unmarshal(lr, &f) != nil || f != float64(int64(f)) || bytes.ContainsAny(lr, ".eE") {
		return 0, bad(pyRepr(lr) + " is not of type 'integer', 'string', 'null'")
	}
	if f < -1 {
		return 0, bad(string(lr) + " is less than the minimum of -1")
	}
	if f > 1<<31 {
		f = 1 << 31
	}
	return int(f), nil
}

// pyRepr writes a JSON value as Python prints it in a schema error
// (None, True, False; anything else as it came).
func pyRepr(raw jsonRaw) string {
	switch string(raw) {
	case "null":
		return "None"
	case "true":
		return "True"
	case "false":
		return "False"
	}
	return truncate(string(raw), 64)
}

// consoleControl are the characters Nova strips from console output (all
// C0 controls but tab and newline).
var consoleControl = regexp.MustCompile("[\x00-\x08\x0B-\x1F]")

// consoleText is what Nova makes of a guest's log: its last n lines (all
// for a negative n, none for 0), every byte outside ASCII replaced by
// U+FFFD, the control characters but tab and newline removed.
func consoleText(log []byte, n int) string {
	if n == 0 {
		return ""
	}
	if n > 0 {
		lines := bytes.Split(log, []byte("\n"))
		if len(lines) > n {
			log = bytes.Join(lines[len(lines)-n:], []byte("\n"))
		}
	}
	var b strings.Builder
	b.Grow(len(log))
	for _, c := range log {
		if c >= 0x80 {
			b.WriteRune('\uFFFD')
		} else {
			b.WriteByte(c)
		}
	}
	return consoleControl.ReplaceAllString(b.String(), "")
}

// consoleOutput is the os-getConsoleOutput action: the end of the
// guest's serial console log, read by the agent of its host (a stopped
// server's too, as Nova's). A length keeps the last lines only; Nova's
// schema documents -1 as unlimited, and so does keel (any negative
// length). A server without a host (building, or shelved and offloaded)
// is 409, as Nova's "not ready"; a guest its host does not have is 404.
func (a *serverActionsAPI) consoleOutput(w http.ResponseWriter, r *http.Request, in records.Instance, raw jsonRaw) error {
	n, err := consoleLength(raw)
	if err != nil {
		return err
	}
	if in.Host == "" {
		return conflict("Instance " + in.UUID + " is not ready")
	}
	log, err := a.conductor.ConsoleOutput(r.Context(), in)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return notFoundf("Instance %s could not be found.", in.UUID)
	case errors.Is(err, compute.ErrNoConsole):
		return &apiError{http.StatusNotImplemented, "The requested functionality is not supported."}
	case err != nil:
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"output": consoleText(log, n)})
	return nil
}

// restoreServer is the restore action. keel deletes at once, as Nova does
// with reclaim_instance_interval = 0: no server is ever soft-deleted, so
// a server that exists cannot be restored — 409 with Nova's words (a
// locked one's as Nova's lock check words it for a non-admin).
func (a *serverActionsAPI) restoreServer(r *http.Request, in records.Instance) error {
	if err := checkLocked(r, in); err != nil {
		return conflict("Instance " + in.UUID + " is in an invalid state for 'restore'")
	}
	return conflict("Cannot 'restore' instance " + in.UUID + " while it is in vm_state " + string(in.VMState))
}

// forceDelete is the forceDelete action: with no soft-deleted servers it
// is a delete (in any state, a locked server only by an admin), answered
// 202 as Nova does.
func (a *serverActionsAPI) forceDelete(w http.ResponseWriter, r *http.Request, in records.Instance) error {
	if err := checkLocked(r, in); err != nil {
		return err
	}
	if err := a.conductor.Delete(r.Context(), in.UUID); err != nil {
		return err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: "delete"})
	w.WriteHeader(http.StatusAccepted)
	return nil
}
