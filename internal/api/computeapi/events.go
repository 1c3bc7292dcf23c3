package computeapi

import (
	"encoding/json"
	"net/http"
	"slices"
)

// externalEventNames are the event names os-server-external-events takes,
// with the microversion each was added at.
var externalEventNames = map[string]int{
	"network-changed": 1, "network-vif-plugged": 1, "network-vif-unplugged": 1, "network-vif-deleted": 1,
	"volume-extended": 51, "power-update": 76, "accelerator-request-bound": 82,
}

var externalEventStatuses = []string{"failed", "completed", "in-progress"}

// serverExternalEvents is POST /os-server-external-events (admin): other
// services tell the compute service of network, volume or power changes
// to servers. keel has no network or volume service to send them, so it
// acts on none: each event is checked and answered as Nova does (200 for
// a placed server, 404 for an unknown one, 422 for one without a host);
// the request is 404 if no event was accepted, 207 if some were not.
func (a *serversAPI) serverExternalEvents(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Events []map[string]json.RawMessage `json:"events"`
	}
	if err := decode(r, &body); err != nil {
		return err
	}
	if len(body.Events) == 0 {
		return badRequest("Invalid input for field/attribute events: [] is too short")
	}
	out := make([]map[string]any, 0, len(body.Events))
	accepted := 0
	for _, ev := range body.Events {
		e := map[string]any{}
		str := map[string]string{}
		for k, raw := range ev {
			switch k {
			case "name", "server_uuid", "tag", "status":
			default:
				return badRequest("Invalid input for field/attribute events. Additional properties are not allowed ('" + k + "' was unexpected)")
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return badRequest("Invalid input for field/attribute " + k + ": not a string")
			}
			str[k] = s
			e[k] = s
		}
		if v, ok := externalEventNames[str["name"]]; !ok || !version(r).AtLeast(v) {
			return badRequest("Invalid input for field/attribute name. Value: " + str["name"] + ". It is not a known event name")
		}
		if str["server_uuid"] == "" {
			return badRequest("Invalid input for field/attribute events: 'server_uuid' is a required property")
		}
		if s, ok := str["status"]; ok && !slices.Contains(externalEventStatuses, s) {
			return badRequest("Invalid input for field/attribute status. Value: " + s + ". It is not one of ['failed', 'completed', 'in-progress']")
		}
		if _, ok := str["status"]; !ok {
			e["status"] = "completed"
		}
		in, err := a.store.GetInstance(r.Context(), str["server_uuid"])
		switch {
		case isNotFound(err):
			e["code"] = http.StatusNotFound
		case err != nil:
			return err
		case in.Host == "":
			e["code"] = http.StatusUnprocessableEntity
		default:
			e["code"] = http.StatusOK
			accepted++
		}
		out = append(out, e)
	}
	status := http.StatusOK
	switch {
	case accepted == 0:
		return notFound("No instances found for any event")
	case accepted < len(out):
		status = http.StatusMultiStatus
	}
	writeJSON(w, status, map[string]any{"events": out})
	return nil
}
