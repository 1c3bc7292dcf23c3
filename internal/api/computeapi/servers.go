package computeapi

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"unicode/utf8"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/requestid"
)

// serverBody is what POST /servers and PUT /servers/{id} accept, kept raw
// so types can be checked as Nova's JSON schema does.
type serverBody map[string]json.RawMessage

// stringField reads an optional string field; present but not a string is
// a 400.
func (b serverBody) stringField(name string) (string, bool, error) {
	raw, ok := b[name]
	if !ok {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", true, badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. %s is not of type 'string'", name, raw, raw))
	}
	return s, true, nil
}

// checkName validates a server name as Nova does: a string of 1 to 255
// characters without leading or trailing whitespace.
func checkName(name string) error {
	if name == "" || strings.TrimSpace(name) == "" {
		return badRequest("Invalid input for field/attribute name. Value: " + name + ". '" + name + "' is too short or blank")
	}
	if utf8.RuneCountInString(name) > 255 {
		return badRequest("Invalid input for field/attribute name. Value: " + name + ". is too long (more than 255 characters)")
	}
	if strings.TrimSpace(name) != name {
		return badRequest("Invalid input for field/attribute name. Value: " + name + ". has leading or trailing whitespace")
	}
	return checkPrintable("name", name)
}

// accessIPs reads accessIPv4 and accessIPv6 into in, checking each is an
// address of its family ("" clears it); IPv6 is kept in canonical form.
func (b serverBody) accessIPs(in *records.Instance) error {
	for _, f := range []struct {
		name string
		v4   bool
		dst  *string
	}{{"accessIPv4", true, &in.AccessIPv4}, {"accessIPv6", false, &in.AccessIPv6}} {
		s, ok, err := b.stringField(f.name)
		if err != nil || !ok {
			if err != nil {
				return err
			}
			continue
		}
		if s == "" {
			*f.dst = ""
			continue
		}
		ip := net.ParseIP(s)
		if ip == nil || (ip.To4() != nil) != f.v4 || (f.v4 && strings.Contains(s, ":")) {
			return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. '%s' is not a valid %s address", f.name, s, s, map[bool]string{true: "IPv4", false: "IPv6"}[f.v4]))
		}
		*f.dst = ip.String()
	}
	return nil
}

func (b serverBody) diskConfig(in *records.Instance) error {
	s, ok, err := b.stringField("OS-DCF:diskConfig")
	if err != nil || !ok {
		return err
	}
	if s != "AUTO" && s != "MANUAL" {
		return badRequest("Invalid input for field/attribute OS-DCF:diskConfig. Value: " + s + ". '" + s + "' is not one of ['AUTO', 'MANUAL']")
	}
	in.DiskConfig = s
	return nil
}

func (b serverBody) description(mv Microversion, in *records.Instance) error {
	raw, ok := b["description"]
	if !ok {
		return nil
	}
	if !mv.AtLeast(19) {
		return badRequest("Invalid input for field/attribute server. Additional properties are not allowed ('description' was unexpected)")
	}
	var d *string
	if err := json.Unmarshal(raw, &d); err != nil {
		return badRequest("Invalid input for field/attribute description: not a string or null")
	}
	in.Description = ""
	if d != nil {
		if utf8.RuneCountInString(*d) > 255 {
			return badRequest("Invalid input for field/attribute description: longer than 255 characters")
		}
		in.Description = *d
	}
	return nil
}

// trustedCerts reads trusted_image_certificates (2.63) into in, as
// Nova's schema checks it: null (none), or 1 to 50 distinct non-empty
// ids. Below 2.63 it is an unknown property of what (server, rebuild).
func (b serverBody) trustedCerts(mv Microversion, what string, in *records.Instance) error {
	raw, ok := b["trusted_image_certificates"]
	if !ok {
		return nil
	}
	if !mv.AtLeast(63) {
		return badRequest("Invalid input for field/attribute " + what + ". Additional properties are not allowed ('trusted_image_certificates' was unexpected)")
	}
	bad := func(why string) error {
		return badRequest("Invalid input for field/attribute trusted_image_certificates. Value: " + string(raw) + ". " + why)
	}
	var ids []any
	if err := json.Unmarshal(raw, &ids); err != nil {
		return bad(string(raw) + " is not of type 'array', 'null'")
	}
	in.TrustedCerts = nil
	if ids == nil {
		return nil
	}
	switch {
	case len(ids) == 0:
		return bad("[] is too short")
	case len(ids) > 50:
		return bad("it is too long (more than 50 items)")
	}
	seen := map[string]bool{}
	for _, v := range ids {
		id, ok := v.(string)
		switch {
		case !ok:
			return bad(fmt.Sprintf("%v is not of type 'string'", v))
		case id == "":
			return bad("'' is too short")
		case seen[id]:
			return bad(string(raw) + " has non-unique elements")
		}
		seen[id] = true
		in.TrustedCerts = append(in.TrustedCerts, id)
	}
	return nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// decodeMetadata reads server metadata: an object of string values, keys
// of 1 to 255 characters, values of at most 255.
func decodeMetadata(raw json.RawMessage) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, badRequest("Invalid input for field/attribute metadata: must be an object of strings")
	}
	for k, v := range m {
		if k == "" || utf8.RuneCountInString(k) > 255 || utf8.RuneCountInString(v) > 255 {
			return nil, badRequest("Invalid input for field/attribute metadata: keys must have 1 to 255 characters, values at most 255")
		}
	}
	return m, nil
}

// updateServer is PUT /servers/{id}: name, access addresses, disk config
// and (2.19) description.
func (a *serversAPI) updateServer(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Server serverBody `json:"server"`
	}
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	sb := body.Server
	if sb == nil {
		return badRequest("Invalid input for field/attribute server: 'server' is a required property")
	}
	for k := range sb {
		switch k {
		case "name", "accessIPv4", "accessIPv6", "OS-DCF:diskConfig", "description":
		case "hostname":
			if version(r).AtLeast(90) {
				break
			}
			fallthrough
		default:
			return badRequest("Invalid input for field/attribute server. Additional properties are not allowed ('" + k + "' was unexpected)")
		}
	}
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	// Validate once against the loaded copy, then apply to fresh copies
	// until the versioned write lands.
	apply := func(in *records.Instance) error {
		if name, ok, err := sb.stringField("name"); err != nil {
			return err
		} else if ok {
			if err := checkName(name); err != nil {
				return err
			}
			in.Name = name
		}
		if err := sb.accessIPs(in); err != nil {
			return err
		}
		if err := sb.diskConfig(in); err != nil {
			return err
		}
		if h, ok, err := sb.hostnameField(); err != nil {
			return err
		} else if ok {
			in.Hostname = h
		}
		return sb.description(version(r), in)
	}
	if err := apply(&in); err != nil {
		return err
	}
	for range 5 {
		cur, err := a.store.GetInstance(r.Context(), in.UUID)
		if err != nil {
			if isNotFound(err) {
				return notFoundf("Instance %s could not be found.", in.UUID)
			}
			return err
		}
		if err := apply(&cur); err != nil {
			return err
		}
		cur.UpdatedAt = a.clock.Now()
		if in, err = a.store.UpdateInstance(r.Context(), cur); err == nil {
			break
		} else if !placement.IsConflict(err) {
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": a.serverView(r, in, viewUpdate)})
	return nil
}

// instance loads a server the caller may see (its project's, or any for
// an admin).
func (a *base) instance(r *http.Request, id string) (records.Instance, error) {
	in, err := a.store.GetInstance(r.Context(), id)
	c := caller(r)
	if isNotFound(err) || (err == nil && !c.Admin && in.ProjectID != c.ProjectID) {
		return records.Instance{}, notFoundf("Instance %s could not be found.", id)
	}
	return in, err
}

func (a *serversAPI) showServer(w http.ResponseWriter, r *http.Request) error {
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	one := []records.Instance{in}
	if err := a.fillZones(r, one); err != nil {
		return err
	}
	in = one[0]
	writeJSON(w, http.StatusOK, map[string]any{"server": a.serverView(r, in, viewShow)})
	return nil
}

// listAddresses is GET /servers/{id}/ips: keel has no network service,
// so a server has no addresses.
func (a *serversAPI) listAddresses(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.instance(r, r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"addresses": map[string]any{}})
	return nil
}

// showNetworkAddresses is GET /servers/{id}/ips/{network}: never found.
func (a *serversAPI) showNetworkAddresses(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.instance(r, r.PathValue("id")); err != nil {
		return err
	}
	return notFoundf("Instance is not a member of specified network %s: keel has no networks", r.PathValue("network"))
}

func (a *serversAPI) deleteServer(w http.ResponseWriter, r *http.Request) error {
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := checkLocked(r, in); err != nil {
		return err
	}
	if err := a.conductor.Delete(r.Context(), in.UUID); err != nil {
		return err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: "delete"})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// recordAction stores an instance action with the response's request id
// and the caller. Failing to record it is logged, not returned: the
// request itself has been carried out.
func (a *base) recordAction(w http.ResponseWriter, r *http.Request, act records.InstanceAction) {
	c := caller(r)
	act.RequestID = requestid.Ensure(w)
	act.UserID, act.ProjectID = c.UserID, c.ProjectID
	act.StartTime = a.clock.Now()
	if err := a.store.CreateInstanceAction(r.Context(), act); err != nil {
		a.log.Error("recording instance action", "instance", act.InstanceUUID, "action", act.Action, "err", err)
	}
}
