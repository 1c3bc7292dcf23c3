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

func (a *API) createServer(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		Server   serverBody `json:"server"`
		Hints    jsonRaw    `json:"os:scheduler_hints"`
		OldHints jsonRaw    `json:"OS-SCH-HNT:scheduler_hints"`
	}
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	sb := body.Server
	if sb == nil {
		return badRequest("Invalid input for field/attribute server: 'server' is a required property")
	}
	if err := checkServerFields(sb, version(r)); err != nil {
		return err
	}
	if err := checkUserData(sb); err != nil {
		return err
	}
	if err := checkBlockDeviceMappings(sb); err != nil {
		return err
	}
	if _, ok := sb["name"]; !ok {
		return badRequest("Invalid input for field/attribute server. 'name' is a required property")
	}
	name, _, err := sb.stringField("name")
	if err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return err
	}
	var flavorRef any
	if raw, ok := sb["flavorRef"]; ok {
		if err := json.Unmarshal(raw, &flavorRef); err != nil {
			return badRequest("Invalid input for field/attribute flavorRef")
		}
	}
	ref := fmt.Sprint(flavorRef)
	if flavorRef == nil || ref == "" {
		return badRequest("Invalid input for field/attribute flavorRef: 'flavorRef' is a required property")
	}
	// flavorRef may be an id or a link ending in the id.
	ref = ref[strings.LastIndex(ref, "/")+1:]
	f, err := a.flavor(r, ref)
	if err != nil {
		if statusOf(err) == http.StatusNotFound {
			return badRequest("Flavor " + ref + " could not be found.")
		}
		return err
	}
	if err := placement.HardwareSpecs(f.VCPUs, f.ExtraSpecs); err != nil {
		return badRequest(err.Error())
	}
	imageRef, _, err := sb.stringField("imageRef")
	if err != nil {
		return err
	}
	image := imageRef[strings.LastIndex(imageRef, "/")+1:]
	if image != "" && a.cfg.ImageExists != nil && !a.cfg.ImageExists(image) {
		return badRequest("Can not find requested image " + imageRef)
	}
	var keyName *string
	if raw, ok := sb["key_name"]; ok {
		var k *string
		if err := json.Unmarshal(raw, &k); err != nil {
			return badRequest("Invalid input for field/attribute key_name. Value: " + string(raw) + ". It is not of type 'string'")
		}
		keyName = k
	}
	if err := checkPersonality(r, sb); err != nil {
		return err
	}
	if err := checkNetworking(sb); err != nil {
		return err
	}
	zoneRef, _, err := sb.stringField("availability_zone")
	if err != nil {
		return err
	}
	if zone, _, _ := strings.Cut(zoneRef, ":"); zone != "" {
		if err := a.checkZoneKnown(r.Context(), zone); err != nil {
			return err
		}
	}
	in := records.Instance{Name: name, Flavor: f, ImageRef: image}
	if err := sb.accessIPs(&in); err != nil {
		return err
	}
	if err := sb.diskConfig(&in); err != nil {
		return err
	}
	if err := sb.description(r, &in); err != nil {
		return err
	}
	if raw, ok := sb["metadata"]; ok {
		if in.Metadata, err = decodeMetadata(raw); err != nil {
			return err
		}
	}
	adminPass, _, err := sb.stringField("adminPass")
	if err != nil {
		return err
	}
	c := caller(r)
	in.ProjectID, in.UserID = c.ProjectID, c.UserID
	if err := a.checkPersonalityQuota(r.Context(), c.ProjectID, sb); err != nil {
		return err
	}
	if keyName != nil {
		// The caller's own key pair, as Nova looks it up.
		kp, err := a.cfg.Store.GetKeyPair(r.Context(), c.UserID, *keyName)
		if isNotFound(err) {
			return badRequest("Invalid key_name provided.")
		}
		if err != nil {
			return err
		}
		in.KeyName, in.KeyData = kp.Name, kp.PublicKey
	}
	// "zone:host" (admin only, as in Nova) forces the host.
	zone, host, forced := strings.Cut(zoneRef, ":")
	if forced && !c.Admin {
		return forbidden("os_compute_api:servers:create:forced_host")
	}
	in.Zone = zone
	hints := body.Hints
	if hints == nil {
		hints = body.OldHints
	}
	if in.Hints, err = a.schedulerHints(r, hints); err != nil {
		return err
	}
	minCount, count, err := createCount(sb)
	if err != nil {
		return err
	}
	if err := a.checkMetadataQuota(r.Context(), c.ProjectID, len(in.Metadata)); err != nil {
		return err
	}
	if count, err = a.fitCount(r.Context(), c.ProjectID, f, minCount, count); err != nil {
		return err
	}
	var retRes bool
	if raw, ok := sb["return_reservation_id"]; ok {
		if err := json.Unmarshal(raw, &retRes); err != nil {
			return badRequest("Invalid input for field/attribute return_reservation_id: not a boolean")
		}
	}
	in.ReservationID = "r-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:8]
	if forced && in.Zone == "" {
		in.Zone = "nova"
	}
	// Several servers (min_count/max_count) are booted one after another,
	// named as Nova's multi_instance_display_name_template does.
	var first records.Instance
	for i := range count {
		one := in
		one.LaunchIndex = i
		one.Metadata = maps.Clone(in.Metadata)
		if count > 1 {
			one.Name = fmt.Sprintf("%s-%d", in.Name, i+1)
		}
		if forced {
			one, err = a.cfg.Conductor.BootOn(r.Context(), one, host)
		} else {
			one, err = a.cfg.Conductor.Boot(r.Context(), one)
		}
		if one.UUID != "" {
			a.recordAction(w, r, records.InstanceAction{InstanceUUID: one.UUID, Action: "create", Message: one.Fault})
		}
		if err != nil {
			if i >= minCount && quotaRefused(err) {
				break // min_count booted; a racing boot took the rest
			}
			return err
		}
		if i == 0 {
			first = one
		}
	}
	if retRes {
		writeJSON(w, http.StatusAccepted, map[string]any{"reservation_id": in.ReservationID})
		return nil
	}
	out := map[string]any{
		"id": first.UUID, "links": a.link("servers", first.UUID), "OS-DCF:diskConfig": cmpOr(first.DiskConfig, "MANUAL"),
		"security_groups": []map[string]string{{"name": "default"}},
	}
	// Nova generates a password when none is given; keel's guests have no
	// password to set, so it hands back the one given, or an empty one.
	out["adminPass"] = adminPass
	writeJSON(w, http.StatusAccepted, map[string]any{"server": out})
	return nil
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
