package computeapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/requestid"
)

// serverStatus is Nova's status for a vm_state and task_state.
func serverStatus(in records.Instance) string {
	if s, ok := lifecycleStatus(in); ok {
		return s
	}
	switch in.VMState {
	case records.VMBuilding:
		return "BUILD"
	case records.VMError:
		return "ERROR"
	case records.VMDeleted:
		return "DELETED"
	}
	switch in.TaskState {
	case records.TaskMigrating:
		return "MIGRATING"
	case records.TaskResizePrep:
		return "RESIZE"
	case records.TaskResizeReverting:
		return "REVERT_RESIZE"
	}
	if in.VMState == records.VMResized {
		return "VERIFY_RESIZE"
	}
	return "ACTIVE"
}

// hostID is Nova's opaque per-project host hash.
func hostID(in records.Instance) string {
	if in.Host == "" {
		return ""
	}
	sum := sha256.Sum224([]byte(in.ProjectID + in.Host))
	return hex.EncodeToString(sum[:])
}

// serverViewKind selects which of Nova's server views to render.
type serverViewKind int

const (
	viewBrief  serverViewKind = iota // GET /servers: id, name, links
	viewDetail                       // GET /servers/detail
	viewShow                         // GET /servers/{id}
	viewUpdate                       // PUT /servers/{id}
)

// serverView renders an instance in the shape Nova gives the request's
// microversion and caller: the fields every view has, then the detail
// view's extended attributes (admin-only ones for admins).
func (a *API) serverView(r *http.Request, in records.Instance, kind serverViewKind) map[string]any {
	v := map[string]any{"id": in.UUID, "name": in.Name, "links": a.link("servers", in.UUID)}
	if kind == viewBrief {
		return v
	}
	ver := version(r)
	if kind == viewUpdate && ver.AtLeast(75) {
		kind = viewShow // 2.75: PUT answers with the whole server
	}
	v["status"] = serverStatus(in)
	v["tenant_id"], v["user_id"] = in.ProjectID, in.UserID
	meta := in.Metadata
	if meta == nil {
		meta = map[string]string{}
	}
	v["metadata"] = meta
	v["hostId"] = hostID(in)
	v["image"] = ""
	if in.ImageRef != "" {
		v["image"] = map[string]any{"id": in.ImageRef, "links": a.link("images", in.ImageRef)[1:]}
	}
	v["created"], v["updated"] = timeStr(in.CreatedAt), timeStr(in.UpdatedAt)
	v["addresses"] = map[string]any{}
	v["accessIPv4"], v["accessIPv6"] = in.AccessIPv4, in.AccessIPv6
	diskConfig := in.DiskConfig
	if diskConfig == "" {
		diskConfig = "MANUAL"
	}
	v["OS-DCF:diskConfig"] = diskConfig
	switch v["status"] {
	case "ACTIVE", "BUILD", "REBUILD", "RESIZE", "VERIFY_RESIZE", "MIGRATING":
		v["progress"] = 0 // as Nova: only in the statuses that progress
	}
	if ver.AtLeast(47) {
		specs := in.Flavor.ExtraSpecs
		if specs == nil {
			specs = map[string]string{}
		}
		v["flavor"] = map[string]any{"vcpus": in.Flavor.VCPUs, "ram": in.Flavor.RAMMB, "disk": in.Flavor.DiskGB,
			"ephemeral": 0, "swap": 0, "original_name": in.Flavor.Name, "extra_specs": specs}
	} else {
		v["flavor"] = map[string]any{"id": in.Flavor.ID, "links": a.link("flavors", in.Flavor.ID)[1:]}
	}
	if ver.AtLeast(9) {
		v["locked"] = in.Locked
	}
	if ver.AtLeast(19) {
		var desc any
		if in.Description != "" {
			desc = in.Description
		}
		v["description"] = desc
	}
	if ver.AtLeast(26) {
		v["tags"] = tagList(in)
	}
	if ver.AtLeast(63) {
		v["trusted_image_certificates"] = nil
	}
	if ver.AtLeast(73) {
		v["locked_reason"] = nil
		if in.Locked && in.LockedReason != "" {
			v["locked_reason"] = in.LockedReason
		}
	}
	if kind == viewShow && ver.AtLeast(71) || kind == viewUpdate && ver.AtLeast(71) {
		v["server_groups"] = serverGroupsOf(in)
	}
	if kind == viewUpdate {
		return v
	}
	if in.VMState == records.VMError && in.Fault != "" {
		v["fault"] = map[string]any{"code": 500, "message": in.Fault, "created": timeStr(in.UpdatedAt)}
	}
	var task any
	if in.TaskState != "" {
		task = in.TaskState
	}
	power := records.PowerStateOf(in)
	v["OS-EXT-AZ:availability_zone"] = in.Zone
	v["config_drive"] = ""
	v["key_name"] = nil
	if in.KeyName != "" {
		v["key_name"] = in.KeyName
	}
	v["OS-SRV-USG:launched_at"], v["OS-SRV-USG:terminated_at"] = nil, nil
	if in.VMState != records.VMBuilding && in.VMState != records.VMError && in.VMState != records.VMDeleted {
		v["OS-SRV-USG:launched_at"] = strings.TrimSuffix(fmt.Sprint(timeStr(in.CreatedAt)), "Z") + ".000000"
	}
	v["OS-EXT-STS:vm_state"], v["OS-EXT-STS:task_state"], v["OS-EXT-STS:power_state"] = in.VMState, task, power
	v["os-extended-volumes:volumes_attached"] = []any{}
	v["security_groups"] = []map[string]string{{"name": "default"}}
	if caller(r).Admin {
		var host any
		if in.Host != "" {
			host = in.Host
		}
		v["OS-EXT-SRV-ATTR:host"], v["OS-EXT-SRV-ATTR:hypervisor_hostname"] = host, host
		v["OS-EXT-SRV-ATTR:instance_name"] = "instance-" + in.UUID[:8]
		if ver.AtLeast(3) {
			var res any
			if in.ReservationID != "" {
				res = in.ReservationID
			}
			v["OS-EXT-SRV-ATTR:reservation_id"] = res
			v["OS-EXT-SRV-ATTR:launch_index"] = in.LaunchIndex
			v["OS-EXT-SRV-ATTR:kernel_id"], v["OS-EXT-SRV-ATTR:ramdisk_id"] = "", ""
			v["OS-EXT-SRV-ATTR:hostname"] = hostnameOf(in.Name)
			v["OS-EXT-SRV-ATTR:root_device_name"] = nil
			if !ver.AtLeast(75) || kind != viewUpdate {
				v["OS-EXT-SRV-ATTR:user_data"] = nil
			}
		}
	}
	return v
}

// hostnameOf is the guest hostname Nova derives from a server's name:
// lower case, characters other than letters, digits, '-' and '.' dropped,
// at most 63 characters.
func hostnameOf(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.ReplaceAll(name, " ", "-")) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			b.WriteRune(r)
		}
	}
	h := strings.Trim(b.String(), "-.")
	if len(h) > 63 {
		h = strings.TrimRight(h[:63], "-.")
	}
	if h == "" {
		h = "server"
	}
	return h
}

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

func (b serverBody) description(r *http.Request, in *records.Instance) error {
	raw, ok := b["description"]
	if !ok {
		return nil
	}
	if !version(r).AtLeast(19) {
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
func (a *API) updateServer(w http.ResponseWriter, r *http.Request) error {
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
		return sb.description(r, in)
	}
	if err := apply(&in); err != nil {
		return err
	}
	for range 5 {
		cur, err := a.cfg.Store.GetInstance(r.Context(), in.UUID)
		if err != nil {
			if isNotFound(err) {
				return notFoundf("Instance %s could not be found.", in.UUID)
			}
			return err
		}
		if err := apply(&cur); err != nil {
			return err
		}
		cur.UpdatedAt = a.cfg.Clock.Now()
		if in, err = a.cfg.Store.UpdateInstance(r.Context(), cur); err == nil {
			break
		} else if !placement.IsConflict(err) {
			return err
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"server": a.serverView(r, in, viewUpdate)})
	return nil
}

// listQuery is GET /servers' query, checked as Nova checks it.
type listQuery struct {
	all          bool
	tenant       string // with all: only this project's servers
	name         *regexp.Regexp
	host, status string
	flavor       string
	image        string
	changesSince time.Time
	// changesBefore (2.66): only servers changed at or before it.
	changesBefore time.Time
	limit         int
	marker        string
	reservation   string
	// 2.26 tag filters: comma-separated lists.
	tags, tagsAny, notTags, notTagsAny []string
}

func parseListQuery(r *http.Request) (listQuery, error) {
	q := r.URL.Query()
	c := caller(r)
	lq := listQuery{limit: -1}
	lq.all = c.Admin && (q.Get("all_tenants") == "1" || strings.EqualFold(q.Get("all_tenants"), "true") || (q.Has("all_tenants") && q.Get("all_tenants") == ""))
	if lq.all {
		// As in Nova, tenant_id counts only with all_tenants.
		lq.tenant = cmpOr(q.Get("tenant_id"), q.Get("project_id"))
	}
	if n := q.Get("name"); n != "" {
		re, err := regexp.Compile(n)
		if err != nil {
			return lq, badRequest("Invalid input for query parameter name: not a valid regular expression")
		}
		lq.name = re
	}
	if c.Admin {
		lq.host = q.Get("host")
	}
	lq.status = q.Get("status")
	lq.flavor = q.Get("flavor")
	lq.image = q.Get("image")
	if s := q.Get("changes-since"); q.Has("changes-since") {
		t, err := parseISOTime(s)
		if err != nil {
			return lq, badRequest("Invalid input for query parameters changes-since. Value: " + s + ". '" + s + "' is not a 'date-time'")
		}
		lq.changesSince = t
	}
	if s := q.Get("changes-before"); q.Has("changes-before") && version(r).AtLeast(66) {
		t, err := parseISOTime(s)
		if err != nil {
			return lq, badRequest("Invalid input for query parameters changes-before. Value: " + s + ". '" + s + "' is not a 'date-time'")
		}
		if !lq.changesSince.IsZero() && t.Before(lq.changesSince) {
			return lq, badRequest("The value of changes-since must be less than or equal to changes-before.")
		}
		lq.changesBefore = t
	}
	if err := checkListStatusAndSort(q, version(r)); err != nil {
		return lq, err
	}
	if q.Has("limit") {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 0 {
			return lq, badRequest("Invalid input for query parameters limit. Value: " + q.Get("limit") + ". not a non-negative integer")
		}
		lq.limit = min(n, 1000)
	}
	lq.marker = q.Get("marker")
	lq.reservation = q.Get("reservation_id")
	if version(r).AtLeast(26) {
		split := func(k string) []string {
			if v := q.Get(k); v != "" {
				return strings.Split(v, ",")
			}
			return nil
		}
		lq.tags, lq.tagsAny, lq.notTags, lq.notTagsAny = split("tags"), split("tags-any"), split("not-tags"), split("not-tags-any")
	}
	return lq, nil
}

func hasAll(tags, want []string) bool {
	for _, t := range want {
		if !slices.Contains(tags, t) {
			return false
		}
	}
	return true
}

func hasAny(tags, want []string) bool {
	return slices.ContainsFunc(want, func(t string) bool { return slices.Contains(tags, t) })
}

// parseISOTime reads an ISO 8601 time as Nova's date-time checks accept
// it: with or without fractional seconds and zone (UTC when absent).
func parseISOTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999999", "2006-01-02T15:04:05Z0700", "2006-01-02T15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO 8601 time", s)
}

func (lq listQuery) match(c Caller, in records.Instance) bool {
	switch {
	case !lq.all && in.ProjectID != c.ProjectID,
		lq.tenant != "" && in.ProjectID != lq.tenant,
		lq.reservation != "" && in.ReservationID != lq.reservation,
		lq.tags != nil && !hasAll(in.Tags, lq.tags),
		lq.tagsAny != nil && !hasAny(in.Tags, lq.tagsAny),
		lq.notTags != nil && hasAll(in.Tags, lq.notTags),
		lq.notTagsAny != nil && hasAny(in.Tags, lq.notTagsAny),
		lq.host != "" && in.Host != lq.host,
		lq.status != "" && !strings.EqualFold(lq.status, serverStatus(in)),
		lq.name != nil && !lq.name.MatchString(in.Name),
		lq.flavor != "" && in.Flavor.ID != lq.flavor,
		lq.image != "" && in.ImageRef != lq.image[strings.LastIndex(lq.image, "/")+1:],
		!lq.changesSince.IsZero() && in.UpdatedAt.Before(lq.changesSince),
		!lq.changesBefore.IsZero() && in.UpdatedAt.After(lq.changesBefore):
		return false
	}
	return true
}

func (a *API) listServers(detail bool) func(w http.ResponseWriter, r *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		lq, err := parseListQuery(r)
		if err != nil {
			return err
		}
		ins, err := a.cfg.Store.ListInstances(r.Context(), "")
		if err != nil {
			return err
		}
		c := caller(r)
		var sel []records.Instance
		for _, in := range ins {
			if lq.match(c, in) {
				sel = append(sel, in)
			}
		}
		// Nova's default order: newest first.
		slices.SortFunc(sel, func(x, y records.Instance) int {
			if d := y.CreatedAt.Compare(x.CreatedAt); d != 0 {
				return d
			}
			return strings.Compare(y.UUID, x.UUID)
		})
		if lq.marker != "" {
			i := slices.IndexFunc(sel, func(in records.Instance) bool { return in.UUID == lq.marker })
			if i < 0 {
				return badRequest("marker [" + lq.marker + "] not found")
			}
			sel = sel[i+1:]
		}
		out := map[string]any{}
		if lq.limit >= 0 && len(sel) >= lq.limit {
			if len(sel) > lq.limit && lq.limit > 0 {
				out["servers_links"] = a.nextLink(r, "servers", sel[lq.limit-1].UUID)
			}
			sel = sel[:lq.limit]
		}
		kind := viewBrief
		if detail {
			kind = viewDetail
			if err := a.fillZones(r, sel); err != nil {
				return err
			}
		}
		list := make([]any, 0, len(sel))
		for _, in := range sel {
			list = append(list, a.serverView(r, in, kind))
		}
		out["servers"] = list
		writeJSON(w, http.StatusOK, out)
		return nil
	}
}

// nextLink is a collection's "next" link: the same query from after
// marker.
func (a *API) nextLink(r *http.Request, collection, marker string) []map[string]string {
	q := r.URL.Query()
	q.Set("marker", marker)
	path := strings.TrimPrefix(r.URL.Path, "/compute")
	return []map[string]string{{"rel": "next", "href": a.cfg.BaseURL + path + "?" + q.Encode()}}
}

// instance loads a server the caller may see (its project's, or any for
// an admin).
func (a *API) instance(r *http.Request, id string) (records.Instance, error) {
	in, err := a.cfg.Store.GetInstance(r.Context(), id)
	c := caller(r)
	if isNotFound(err) || (err == nil && !c.Admin && in.ProjectID != c.ProjectID) {
		return records.Instance{}, notFoundf("Instance %s could not be found.", id)
	}
	return in, err
}

// fillZones gives the placed instances booted without a zone their host's
// zone, as Nova records the host's zone on the instance when it schedules
// one.
func (a *API) fillZones(r *http.Request, ins []records.Instance) error {
	if !slices.ContainsFunc(ins, func(in records.Instance) bool { return in.Zone == "" && in.Host != "" }) {
		return nil
	}
	svcs, err := a.computeServices(r.Context())
	if err != nil {
		return err
	}
	aggZones, err := a.hostZones(r.Context())
	if err != nil {
		return err
	}
	byHost := map[string]string{}
	for _, s := range svcs {
		byHost[s.Host] = serviceZone(s, aggZones)
	}
	for i := range ins {
		if ins[i].Zone == "" && ins[i].Host != "" {
			ins[i].Zone = byHost[ins[i].Host]
		}
	}
	return nil
}

func (a *API) showServer(w http.ResponseWriter, r *http.Request) error {
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
func (a *API) listAddresses(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.instance(r, r.PathValue("id")); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"addresses": map[string]any{}})
	return nil
}

// showNetworkAddresses is GET /servers/{id}/ips/{network}: never found.
func (a *API) showNetworkAddresses(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.instance(r, r.PathValue("id")); err != nil {
		return err
	}
	return notFoundf("Instance is not a member of specified network %s: keel has no networks", r.PathValue("network"))
}

func (a *API) deleteServer(w http.ResponseWriter, r *http.Request) error {
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if err := checkLocked(r, in); err != nil {
		return err
	}
	if err := a.cfg.Conductor.Delete(r.Context(), in.UUID); err != nil {
		return err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: "delete"})
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// serverAction handles POST /servers/{id}/action; keel implements
// os-migrateLive. The server is looked up first, so an unknown server is
// a 404 whatever the action.
func (a *API) serverAction(w http.ResponseWriter, r *http.Request) error {
	var body map[string]jsonRaw
	if err := decode(r, &body); err != nil {
		return err
	}
	if err := oneAction(body); err != nil {
		return err
	}
	in, err := a.instance(r, r.PathValue("id"))
	if err != nil {
		return err
	}
	if raw, ok := body["os-resetState"]; ok {
		return a.resetState(w, r, in, raw)
	}
	if handled, err := a.moveAction(w, r, in, body); handled {
		return err
	}
	for key, raw := range body {
		if _, ok := lifecycleActions[key]; ok && len(body) == 1 {
			return a.lifecycleAct(w, r, in, key, raw)
		}
	}
	raw, ok := body["os-migrateLive"]
	if !ok {
		for k := range body {
			return badRequest("Action " + k + " is not supported by keel (supported: os-migrateLive, migrate, resize, confirmResize, revertResize, os-resetState, os-stop, os-start, reboot, pause, unpause, suspend, resume, rescue, unrescue, rebuild, shelve, shelveOffload, unshelve, lock, unlock)")
		}
		return badRequest("Malformed request body: no action given")
	}
	if !caller(r).Admin {
		return forbidden("os_compute_api:os-migrate-server:migrate_live")
	}
	args, err := liveMigrateArgs(raw, version(r))
	if err != nil {
		return err
	}
	host := ""
	if args.Host != nil {
		host = *args.Host
		if _, err := a.cfg.Store.GetService(r.Context(), host); err != nil {
			if isNotFound(err) {
				return badRequest("Compute host " + host + " could not be found.")
			}
			return err
		}
	}
	m, err := a.cfg.Conductor.LiveMigrate(r.Context(), in.UUID, host)
	if err != nil {
		return err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: "live-migration", MigrationID: m.ID})
	// Before 2.34 the pre-checks were synchronous: a migration that ended
	// in error at once is a 400 with its reason.
	if !version(r).AtLeast(34) && m.Status == records.MigrationError {
		return badRequest(m.Error)
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// recordAction stores an instance action with the response's request id
// and the caller. Failing to record it is logged, not returned: the
// request itself has been carried out.
func (a *API) recordAction(w http.ResponseWriter, r *http.Request, act records.InstanceAction) {
	c := caller(r)
	act.RequestID = requestid.Ensure(w)
	act.UserID, act.ProjectID = c.UserID, c.ProjectID
	act.StartTime = a.cfg.Clock.Now()
	if err := a.cfg.Store.CreateInstanceAction(r.Context(), act); err != nil {
		a.cfg.Log.Error("recording instance action", "instance", act.InstanceUUID, "action", act.Action, "err", err)
	}
}
