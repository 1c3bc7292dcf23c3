package computeapi

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"unicode"

	"keel/internal/records"
)

// ServerStatus is Nova's status of a server for its vm_state and
// task_state (the web view shows the same).
func ServerStatus(in records.Instance) string {
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
func (a *base) serverView(r *http.Request, in records.Instance, kind serverViewKind) map[string]any {
	v := map[string]any{"id": in.UUID, "name": in.Name, "links": a.link("servers", in.UUID)}
	if kind == viewBrief {
		return v
	}
	ver := version(r)
	if kind == viewUpdate && ver.AtLeast(75) {
		kind = viewShow // 2.75: PUT answers with the whole server
	}
	v["status"] = ServerStatus(in)
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
		if len(in.TrustedCerts) > 0 {
			v["trusted_image_certificates"] = in.TrustedCerts
		}
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
			v["OS-EXT-SRV-ATTR:hostname"] = instanceHostname(in)
			v["OS-EXT-SRV-ATTR:root_device_name"] = nil
			if !ver.AtLeast(75) || kind != viewUpdate {
				v["OS-EXT-SRV-ATTR:user_data"] = nil
			}
		}
	} else if ver.AtLeast(90) {
		// 2.90: every caller sees the hostname.
		v["OS-EXT-SRV-ATTR:hostname"] = instanceHostname(in)
	}
	return v
}

// instanceHostname is a server's hostname: the one kept, else (a record
// from before keel kept it) its name sanitized, else Nova's default for a
// name that sanitizes to nothing.
func instanceHostname(in records.Instance) string {
	if in.Hostname != "" {
		return in.Hostname
	}
	if h := hostnameOf(in.Name); h != "" {
		return h
	}
	return "Server-" + in.UUID
}

// hostnameOf is the hostname Nova derives from a server's name
// (utils.sanitize_hostname): characters past Latin-1 dropped, cut to 63
// characters, spaces, '_' and '.' made '-', anything but letters, digits,
// '-' and '.' dropped, lower case, no leading or trailing '-' or '.'. It
// may be "".
func hostnameOf(name string) string {
	rs := make([]rune, 0, len(name))
	for _, r := range name {
		if r <= 0xFF {
			rs = append(rs, r)
		}
	}
	if len(rs) > 63 {
		rs = rs[:63]
	}
	var b strings.Builder
	for _, r := range rs {
		switch {
		case r == ' ' || r == '_' || r == '.':
			b.WriteRune('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsNumber(r):
			b.WriteRune(unicode.ToLower(r))
		}
	}
	return strings.Trim(b.String(), ".-")
}

// fillZones gives the placed instances booted without a zone their host's
// zone, as Nova records the host's zone on the instance when it schedules
// one.
func (a *base) fillZones(r *http.Request, ins []records.Instance) error {
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
