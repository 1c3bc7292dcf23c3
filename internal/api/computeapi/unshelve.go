package computeapi

import (
	"encoding/json"
	"net/http"

	"keel/internal/records"
)

// unshelveArgs reads an unshelve's body as Nova's schemas have it: null
// before 2.77; from 2.77 an object with availability_zone (required);
// from 2.91 an object with availability_zone (a name, or null to unpin
// the server from any zone) and host (admin only: the one host the boot
// then considers, through the filters, as Nova's requested_destination).
// The checks follow Nova's compute API's order: a zone or a host only
// for a shelved_offloaded server (409), the zone known (400), the host's
// policy (403), the host known (400) and in the zone the server will be
// pinned to (409). The edit it returns sets the zone and the requested
// host on the record with the action (every unshelve sets the host, so
// none outlives the unshelve that asked for it).
func (a *serverActionsAPI) unshelveArgs(r *http.Request, in records.Instance, raw jsonRaw) (func(*records.Instance), error) {
	zone, host := in.RequestedZone, ""
	edit := func(i *records.Instance) { i.RequestedZone, i.RequestedHost = zone, host }
	if len(raw) == 0 || string(raw) == "null" {
		return edit, nil
	}
	v := version(r)
	if !v.AtLeast(77) {
		return nil, badRequest("Invalid input for field/attribute unshelve. Value: " + string(raw) + ". None is not of type 'null'")
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(raw, &args); err != nil || args == nil {
		return nil, badRequest("Invalid input for field/attribute unshelve. Value: " + string(raw) + ". " + string(raw) + " is not of type 'object', 'null'")
	}
	for k := range args {
		if k != "availability_zone" && (k != "host" || !v.AtLeast(91)) {
			return nil, badRequest("Invalid input for field/attribute unshelve. Value: " + string(raw) + ". Additional properties are not allowed ('" + k + "' was unexpected)")
		}
	}
	rawZone, zonePassed := args["availability_zone"]
	if !zonePassed && !v.AtLeast(91) {
		return nil, badRequest("Invalid input for field/attribute unshelve. Value: " + string(raw) + ". 'availability_zone' is a required property")
	}
	var newZone *string
	if zonePassed {
		if err := json.Unmarshal(rawZone, &newZone); err != nil || newZone == nil && !v.AtLeast(91) {
			return nil, badRequest("Invalid input for field/attribute availability_zone. Value: " + string(rawZone) + ". " + string(rawZone) + " is not of type 'string'")
		}
	}
	if rawHost, ok := args["host"]; ok {
		if err := json.Unmarshal(rawHost, &host); err != nil || string(rawHost) == "null" {
			return nil, badRequest("Invalid input for field/attribute host. Value: " + string(rawHost) + ". " + string(rawHost) + " is not of type 'string'")
		}
	}
	if !zonePassed && host == "" {
		return edit, nil
	}
	if in.VMState != records.VMShelvedOffloaded {
		if in.VMState == records.VMShelved {
			return nil, conflict("Specifying an availability zone or a host when unshelving server \"" + in.UUID + "\" with status \"" + string(in.VMState) + "\" is not supported. The server status must be SHELVED_OFFLOADED.")
		}
		return edit, nil // the lifecycle machine refuses the state
	}
	if newZone != nil && *newZone != "" {
		if err := a.checkZoneKnown(r.Context(), *newZone); err != nil {
			return nil, err
		}
	}
	if zonePassed {
		zone = ""
		if newZone != nil {
			zone = *newZone
		}
	}
	if host == "" {
		return edit, nil
	}
	if !caller(r).Admin {
		return nil, forbidden("os_compute_api:os-shelve:unshelve_to_host")
	}
	hostZone, err := a.computeHostZone(r, host)
	if err != nil {
		return nil, err
	}
	if zone != "" && hostZone != zone {
		return nil, conflict("Host \"" + host + "\" is not in the availability zone \"" + zone + "\".")
	}
	return edit, nil
}

// computeHostZone is the zone of the compute host named host, or Nova's
// 400 for a host that is none.
func (a *serverActionsAPI) computeHostZone(r *http.Request, host string) (string, error) {
	svcs, err := a.computeServices(r.Context())
	if err != nil {
		return "", err
	}
	zones, err := a.hostZones(r.Context())
	if err != nil {
		return "", err
	}
	for _, s := range svcs {
		if s.Host == host {
			return serviceZone(s, zones), nil
		}
	}
	return "", badRequest("Compute host " + host + " could not be found.")
}
