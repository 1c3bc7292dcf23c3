package computeapi

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"keel/internal/placement"
	"keel/internal/records"
)

// createBody is POST /servers' body as decoded: the server, kept raw so
// types can be checked as Nova's schema does, and the scheduler hints
// under either name.
type createBody struct {
	Server   serverBody `json:"server"`
	Hints    jsonRaw    `json:"os:scheduler_hints"`
	OldHints jsonRaw    `json:"OS-SCH-HNT:scheduler_hints"`
}

// createRequest is a create request parsed and checked with nothing but
// its body and microversion (Nova's schema checks): what createServer
// then looks up (flavor, image, zone, key pair, server group), checks
// against quotas and boots.
type createRequest struct {
	// Server is what every server booted by the request starts from: the
	// name, image, access addresses, disk config, description and
	// metadata given, and the zone asked for.
	Server records.Instance
	// FlavorRef is the flavor's id (the last part of a link); ImageRef
	// is the image as given (Server.ImageRef is its id).
	FlavorRef, ImageRef string
	// KeyName is the key pair asked for (nil for none).
	KeyName *string
	// Host is the host forced by availability_zone "zone:host" (Forced
	// set; admin only).
	Host   string
	Forced bool
	// Hints are the scheduler hints, their group not yet looked up.
	Hints *records.SchedulerHints
	// Personality are the files to inject (counted against the quota).
	Personality []personalityFile
	// MinCount and MaxCount are how many servers to boot (at least
	// MinCount, as many as the quotas allow up to MaxCount).
	MinCount, MaxCount int
	// ReturnReservationID answers with the reservation id, not the server.
	ReturnReservationID bool
	// AdminPass is handed back as the server's password.
	AdminPass string
}

// parseCreate checks a create request's body at microversion mv as Nova's
// schema does and reads it into a createRequest. It reads no store, so
// every 400 it gives comes before any lookup.
func parseCreate(body createBody, mv Microversion) (createRequest, error) {
	var req createRequest
	sb := body.Server
	if sb == nil {
		return req, badRequest("Invalid input for field/attribute server: 'server' is a required property")
	}
	if err := checkServerFields(sb, mv); err != nil {
		return req, err
	}
	if err := checkUserData(sb); err != nil {
		return req, err
	}
	if err := checkBlockDeviceMappings(sb); err != nil {
		return req, err
	}
	if _, ok := sb["name"]; !ok {
		return req, badRequest("Invalid input for field/attribute server. 'name' is a required property")
	}
	name, _, err := sb.stringField("name")
	if err != nil {
		return req, err
	}
	if err := checkName(name); err != nil {
		return req, err
	}
	var flavorRef any
	if raw, ok := sb["flavorRef"]; ok {
		if err := json.Unmarshal(raw, &flavorRef); err != nil {
			return req, badRequest("Invalid input for field/attribute flavorRef")
		}
	}
	ref := fmt.Sprint(flavorRef)
	if flavorRef == nil || ref == "" {
		return req, badRequest("Invalid input for field/attribute flavorRef: 'flavorRef' is a required property")
	}
	// flavorRef may be an id or a link ending in the id.
	req.FlavorRef = ref[strings.LastIndex(ref, "/")+1:]
	if req.ImageRef, _, err = sb.stringField("imageRef"); err != nil {
		return req, err
	}
	in := records.Instance{Name: name, ImageRef: req.ImageRef[strings.LastIndex(req.ImageRef, "/")+1:]}
	if raw, ok := sb["key_name"]; ok {
		if err := json.Unmarshal(raw, &req.KeyName); err != nil {
			return req, badRequest("Invalid input for field/attribute key_name. Value: " + string(raw) + ". It is not of type 'string'")
		}
	}
	if req.Personality, err = checkPersonality(mv, sb); err != nil {
		return req, err
	}
	if err := checkNetworking(sb); err != nil {
		return req, err
	}
	zoneRef, _, err := sb.stringField("availability_zone")
	if err != nil {
		return req, err
	}
	// "zone:host" (admin only, as in Nova) forces the host.
	in.Zone, req.Host, req.Forced = strings.Cut(zoneRef, ":")
	if err := sb.accessIPs(&in); err != nil {
		return req, err
	}
	if err := sb.diskConfig(&in); err != nil {
		return req, err
	}
	if err := sb.description(mv, &in); err != nil {
		return req, err
	}
	if err := sb.trustedCerts(mv, "server", &in); err != nil {
		return req, err
	}
	if mv.AtLeast(90) {
		if in.Hostname, _, err = sb.hostnameField(); err != nil {
			return req, err
		}
	}
	if raw, ok := sb["metadata"]; ok {
		if in.Metadata, err = decodeMetadata(raw); err != nil {
			return req, err
		}
	}
	if req.AdminPass, _, err = sb.stringField("adminPass"); err != nil {
		return req, err
	}
	hints := body.Hints
	if hints == nil {
		hints = body.OldHints
	}
	if req.Hints, err = parseSchedulerHints(hints); err != nil {
		return req, err
	}
	if req.MinCount, req.MaxCount, err = createCount(sb); err != nil {
		return req, err
	}
	if in.Hostname != "" && req.MaxCount > 1 {
		return req, badRequest("Unable to allocate a single hostname to multiple instances")
	}
	if raw, ok := sb["return_reservation_id"]; ok {
		if err := json.Unmarshal(raw, &req.ReturnReservationID); err != nil {
			return req, badRequest("Invalid input for field/attribute return_reservation_id: not a boolean")
		}
	}
	req.Server = in
	return req, nil
}

// createServer is POST /servers: the request parsed (parseCreate), its
// names looked up and its quotas checked, then the servers booted.
func (a *serversAPI) createServer(w http.ResponseWriter, r *http.Request) error {
	var body createBody
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	req, err := parseCreate(body, version(r))
	if err != nil {
		return err
	}
	in, count, err := a.resolveCreate(r, req)
	if err != nil {
		return err
	}
	first, err := a.bootServers(w, r, in, req, count)
	if err != nil {
		return err
	}
	if req.ReturnReservationID {
		writeJSON(w, http.StatusAccepted, map[string]any{"reservation_id": in.ReservationID})
		return nil
	}
	out := map[string]any{
		"id": first.UUID, "links": a.link("servers", first.UUID), "OS-DCF:diskConfig": cmpOr(first.DiskConfig, "MANUAL"),
		"security_groups": []map[string]string{{"name": "default"}},
	}
	// Nova generates a password when none is given; keel's guests have no
	// password to set, so it hands back the one given, or an empty one.
	out["adminPass"] = req.AdminPass
	writeJSON(w, http.StatusAccepted, map[string]any{"server": out})
	return nil
}

// resolveCreate looks up what req names (flavor, image, zone, key pair,
// server group) for the caller, checks the forced host's policy and the
// quotas, and returns the server to boot and how many of it.
func (a *serversAPI) resolveCreate(r *http.Request, req createRequest) (records.Instance, int, error) {
	ctx := r.Context()
	in := req.Server
	f, err := a.flavor(r, req.FlavorRef)
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return in, 0, badRequest("Flavor " + req.FlavorRef + " could not be found.")
		}
		return in, 0, err
	}
	if err := placement.HardwareSpecs(f.VCPUs, f.ExtraSpecs); err != nil {
		return in, 0, badRequest(err.Error())
	}
	in.Flavor = f
	if in.ImageRef != "" {
		im, ok := bootImage(ctx, a.image, in.ImageRef)
		if !ok {
			return in, 0, badRequest("Can not find requested image " + req.ImageRef)
		}
		if err := checkImageFits(im, f); err != nil {
			return in, 0, err
		}
	}
	if in.Zone != "" {
		if err := a.checkZoneKnown(ctx, in.Zone); err != nil {
			return in, 0, err
		}
	}
	c := caller(r)
	in.ProjectID, in.UserID = c.ProjectID, c.UserID
	if err := a.checkPersonalityQuota(ctx, c.ProjectID, req.Personality); err != nil {
		return in, 0, err
	}
	if req.KeyName != nil {
		// The caller's own key pair, as Nova looks it up.
		kp, err := a.store.GetKeyPair(ctx, c.UserID, *req.KeyName)
		if isNotFound(err) {
			return in, 0, badRequest("Invalid key_name provided.")
		}
		if err != nil {
			return in, 0, err
		}
		in.KeyName, in.KeyData = kp.Name, kp.PublicKey
	}
	if req.Forced && !c.Admin {
		return in, 0, forbidden("os_compute_api:servers:create:forced_host")
	}
	if req.Hints != nil {
		hints := *req.Hints
		if err := a.resolveGroup(r, &hints); err != nil {
			return in, 0, err
		}
		in.Hints = &hints
	}
	if err := a.checkMetadataQuota(ctx, c.ProjectID, len(in.Metadata)); err != nil {
		return in, 0, err
	}
	count, err := a.fitCount(ctx, c.ProjectID, f, req.MinCount, req.MaxCount)
	if err != nil {
		return in, 0, err
	}
	in.ReservationID = "r-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	if req.Forced && in.Zone == "" {
		in.Zone = "nova"
	}
	return in, count, nil
}

// bootServers boots count servers like in, one after another, named as
// Nova's multi_instance_display_name_template does, each with its create
// action; it returns the first. Once min_count are booted, a quota a
// racing boot took ends the loop without an error.
func (a *serversAPI) bootServers(w http.ResponseWriter, r *http.Request, in records.Instance, req createRequest, count int) (records.Instance, error) {
	var first records.Instance
	for i := range count {
		one := in
		one.LaunchIndex = i
		one.Metadata = maps.Clone(in.Metadata)
		if count > 1 {
			one.Name = fmt.Sprintf("%s-%d", in.Name, i+1)
		}
		if one.Hostname == "" {
			// Nova's: the name sanitized, with the index when there
			// are several ("" keeps Nova's Server-<uuid>: see
			// instanceHostname).
			one.Hostname = hostnameOf(in.Name)
			if one.Hostname != "" && count > 1 {
				one.Hostname = fmt.Sprintf("%s-%d", one.Hostname, i+1)
			}
		}
		// Each boot answers once the store has it scheduled and claimed
		// (or in ERROR: no valid host); its build goes on behind.
		host := ""
		if req.Forced {
			host = req.Host
		}
		one, err := a.conductor.StartBoot(r.Context(), one, host)
		if one.UUID != "" {
			a.recordAction(w, r, records.InstanceAction{InstanceUUID: one.UUID, Action: "create", Message: one.Fault})
		}
		if err != nil {
			if i >= req.MinCount && quotaRefused(err) {
				break // min_count booted; a racing boot took the rest
			}
			return first, err
		}
		if i == 0 {
			first = one
		}
	}
	return first, nil
}

// maxCreateCount bounds min_count/max_count.
const maxCreateCount = 100

// createCount reads min_count and max_count (integers or numeric strings,
// 1 ≤ min ≤ max): keel boots as many as its quotas allow, at least min.
func createCount(sb serverBody) (lo, hi int, err error) {
	lo, hi, err = createBounds(sb)
	if lo == 0 {
		lo = 1
	}
	return lo, hi, err
}

func createBounds(sb serverBody) (int, int, error) {
	read := func(name string) (int, error) {
		raw, ok := sb[name]
		if !ok {
			return 0, nil
		}
		var v any
		if err := json.Unmarshal(raw, &v); err != nil {
			return 0, badRequest("Invalid input for field/attribute " + name)
		}
		n, err := positiveInt(name, v, 1)
		if err != nil {
			return 0, err
		}
		if n > maxCreateCount {
			return 0, badRequest(fmt.Sprintf("Invalid input for field/attribute %s: at most %d", name, maxCreateCount))
		}
		return int(n), nil
	}
	lo, err := read("min_count")
	if err != nil {
		return 0, 0, err
	}
	hi, err := read("max_count")
	if err != nil {
		return 0, 0, err
	}
	switch {
	case lo == 0 && hi == 0:
		return 1, 1, nil
	case hi == 0:
		return lo, lo, nil
	case lo > hi:
		return 0, 0, badRequest("min_count must be <= max_count")
	}
	return lo, hi, nil
}

// checkNetworking refuses what keel cannot give a server: it has no
// network service, so networks may only be absent, empty, "none" or "auto"
// (2.37), and the only security group is "default".
func checkNetworking(sb serverBody) error {
	if raw, ok := sb["networks"]; ok && string(raw) != "null" {
		var s string
		var list []map[string]any
		switch {
		case json.Unmarshal(raw, &s) == nil:
			if s != "none" && s != "auto" {
				return badRequest("Invalid input for field/attribute networks: '" + s + "' is not one of 'none', 'auto'")
			}
		case json.Unmarshal(raw, &list) == nil:
			if len(list) > 0 {
				return badRequest(fmt.Sprintf("Network %v could not be found: keel has no network service (use networks 'none')", list[0]["uuid"]))
			}
		default:
			return badRequest("Invalid input for field/attribute networks")
		}
	}
	if raw, ok := sb["security_groups"]; ok {
		var groups []struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(raw, &groups); err != nil {
			return badRequest("Invalid input for field/attribute security_groups")
		}
		for _, g := range groups {
			if g.Name != "default" {
				return badRequest("Security group " + g.Name + " not found: keel has only the group default")
			}
		}
	}
	return nil
}
