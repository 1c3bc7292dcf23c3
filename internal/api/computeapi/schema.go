package computeapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// What Nova's request schemas (nova/api/openstack/compute/schemas) refuse
// with 400 and keel checks the same way: closed property sets, bounded
// integers, printable names, the shapes of user_data and
// block_device_mapping_v2.

// maxDBInt is the largest integer Nova's database columns hold (2^31-1):
// the bound of flavor sizes and quota values.
const maxDBInt = 1<<31 - 1

// serverCreateFields are the properties of a server create body Nova's
// schema knows, by the microversion that added them; any other is a 400.
var serverCreateFields = map[string]Microversion{
	"name": {2, 1}, "imageRef": {2, 1}, "flavorRef": {2, 1}, "adminPass": {2, 1}, "metadata": {2, 1},
	"networks": {2, 1}, "OS-DCF:diskConfig": {2, 1}, "accessIPv4": {2, 1}, "accessIPv6": {2, 1},
	"personality": {2, 1}, "availability_zone": {2, 1}, "block_device_mapping": {2, 1},
	"block_device_mapping_v2": {2, 1}, "config_drive": {2, 1}, "key_name": {2, 1}, "min_count": {2, 1},
	"max_count": {2, 1}, "return_reservation_id": {2, 1}, "security_groups": {2, 1}, "user_data": {2, 1},
	"description": {2, 19}, "tags": {2, 52}, "trusted_image_certificates": {2, 63}, "host": {2, 74},
	"hypervisor_hostname": {2, 74}, "hostname": {2, 90},
}

// checkServerFields refuses properties Nova's server create schema does
// not have at v, and, from 2.37, a body without networks.
func checkServerFields(sb serverBody, v Microversion) error {
	var unknown []string
	for k := range sb {
		if since, ok := serverCreateFields[k]; !ok || v.less(since) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return badRequest(fmt.Sprintf("Invalid input for field/attribute server. Additional properties are not allowed ('%s' %s unexpected)",
			strings.Join(unknown, "', '"), map[bool]string{true: "was", false: "were"}[len(unknown) == 1]))
	}
	if !v.less(Microversion{2, 37}) {
		if raw, ok := sb["networks"]; !ok || string(raw) == "null" {
			return badRequest("Invalid input for field/attribute server. 'networks' is a required property")
		}
	}
	return nil
}

// checkUserData refuses user_data that is not base64 or longer than
// Nova's 65535 characters.
func checkUserData(sb serverBody) error {
	raw, ok := sb["user_data"]
	if !ok || string(raw) == "null" {
		return nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return badRequest("Invalid input for field/attribute user_data. Value: " + string(raw) + " is not of type 'string'")
	}
	if len(s) > 65535 {
		return badRequest("Invalid input for field/attribute user_data. Value is too long (more than 65535 characters)")
	}
	if _, err := base64.StdEncoding.DecodeString(s); err != nil {
		return badRequest("Invalid input for field/attribute user_data. Value: " + truncate(s, 64) + ". '" + truncate(s, 64) + "' is not a 'base64'")
	}
	return nil
}

// bdmFields are the properties of one block_device_mapping_v2 entry.
var bdmFields = map[string]bool{
	"uuid": true, "source_type": true, "destination_type": true, "guest_format": true, "device_type": true,
	"disk_bus": true, "boot_index": true, "device_name": true, "delete_on_termination": true,
	"snapshot_id": true, "volume_id": true, "volume_size": true, "image_id": true, "no_device": true,
	"connection_info": true, "tag": true, "volume_type": true,
}

// checkBlockDeviceMappings refuses a block_device_mapping_v2 that is not
// a list of objects with Nova's properties, source types and destination
// types.
func checkBlockDeviceMappings(sb serverBody) error {
	raw, ok := sb["block_device_mapping_v2"]
	if !ok || string(raw) == "null" {
		return nil
	}
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return badRequest("Invalid input for field/attribute block_device_mapping_v2. Value: " + truncate(string(raw), 64) + " is not of type 'array' of objects")
	}
	enum := func(m map[string]json.RawMessage, field string, values ...string) error {
		v, ok := m[field]
		if !ok || string(v) == "null" {
			return nil
		}
		var s string
		if json.Unmarshal(v, &s) != nil || !slices.Contains(values, s) {
			return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s is not one of %s", field, truncate(string(v), 64), strings.Join(values, ", ")))
		}
		return nil
	}
	for _, m := range list {
		for k := range m {
			if !bdmFields[k] {
				return badRequest("Invalid input for field/attribute block_device_mapping_v2. Additional properties are not allowed ('" + truncate(k, 64) + "' was unexpected)")
			}
		}
		if err := enum(m, "source_type", "volume", "image", "snapshot", "blank"); err != nil {
			return err
		}
		if err := enum(m, "destination_type", "local", "volume"); err != nil {
			return err
		}
		if v, ok := m["boot_index"]; ok && string(v) != "null" {
			var n any
			if json.Unmarshal(v, &n) != nil {
				return badRequest("Invalid input for field/attribute boot_index")
			}
			if _, err := intValue("boot_index", n, -1<<31, maxDBInt); err != nil {
				return err
			}
		}
	}
	return nil
}

// intValue reads an integer given as a JSON number or a string of digits
// (as Nova's integer parameter types accept) within [lo, hi].
func intValue(field string, v any, lo, hi int64) (int64, error) {
	bad := func(why string) error {
		return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. %s", field, truncate(fmt.Sprint(v), 64), why))
	}
	var n int64
	switch x := v.(type) {
	case float64:
		if x != float64(int64(x)) || x > 1<<62 || x < -(1<<62) {
			return 0, bad("is not of type 'integer'")
		}
		n = int64(x)
	case string:
		s := strings.TrimSpace(x)
		if s == "" {
			return 0, bad("is not of type 'integer'")
		}
		if _, err := fmt.Sscan(s, &n); err != nil || fmt.Sprint(n) != strings.TrimPrefix(s, "+") {
			return 0, bad("is not of type 'integer'")
		}
	default:
		return 0, bad("is not of type 'integer'")
	}
	if n < lo {
		return 0, bad(fmt.Sprintf("is less than the minimum of %d", lo))
	}
	if n > hi {
		return 0, bad(fmt.Sprintf("is greater than the maximum of %d", hi))
	}
	return n, nil
}

// checkPrintable refuses a name (or reason) with control characters, as
// Nova's name formats do.
func checkPrintable(field, s string) error {
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == utf8.RuneError }); i >= 0 {
		return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %q. Invalid characters: a control character (%U) is not allowed", field, truncate(s, 64), []rune(s[i:])[0]))
	}
	return nil
}

// checkText refuses a string field longer than max characters or with
// control characters.
func checkText(field, s string, max int) error {
	if utf8.RuneCountInString(s) > max {
		return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. is too long (more than %d characters)", field, truncate(s, 64), max))
	}
	return checkPrintable(field, s)
}

// checkZoneKnown refuses an availability zone no compute service or
// aggregate is in, as Nova does.
func (a *base) checkZoneKnown(ctx context.Context, zone string) error {
	if zone == "" {
		return nil
	}
	svcs, err := a.computeServices(ctx)
	if err != nil {
		return err
	}
	aggZones, err := a.hostZones(ctx)
	if err != nil {
		return err
	}
	for _, s := range svcs {
		if serviceZone(s, aggZones) == zone {
			return nil
		}
	}
	for _, z := range aggZones {
		if z == zone {
			return nil
		}
	}
	return badRequest("The requested availability zone is not available")
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}

// oneAction refuses an action body that does not name exactly one action,
// as Nova's action dispatch does.
func oneAction(body map[string]jsonRaw) error {
	switch len(body) {
	case 0:
		return badRequest("Malformed request body: no action given")
	case 1:
		return nil
	}
	return badRequest("Malformed request body: too many body keys (an action body names exactly one action)")
}

// knownAction refuses an action body that does not name exactly one
// action, or names one that is not in known, with Nova's answers.
func knownAction(body map[string]jsonRaw, known map[string]bool) error {
	if err := oneAction(body); err != nil {
		return err
	}
	for k := range body {
		if !known[k] {
			return badRequest("There is no such action: " + k)
		}
	}
	return nil
}

// novaBooleans are the values Nova's boolean parameter type takes.
var novaBooleans = map[string]bool{
	"true": true, "True": true, "TRUE": true, "1": true, "on": true, "On": true, "ON": true, "yes": true, "Yes": true, "YES": true,
	"false": false, "False": false, "FALSE": false, "0": false, "off": false, "Off": false, "OFF": false, "no": false, "No": false, "NO": false,
}

// boolValue reads a JSON boolean or one of Nova's boolean strings.
func boolValue(field string, raw json.RawMessage, auto bool) error {
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if _, ok := novaBooleans[s]; ok || (auto && s == "auto") {
			return nil
		}
	}
	want := "a boolean"
	if auto {
		want = "a boolean or 'auto'"
	}
	return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. It must be %s", field, truncate(string(raw), 64), want))
}

type liveMigrate struct{ Host *string }

// liveMigrateArgs checks an os-migrateLive body against Nova's schema for
// v: an object with host (a host name or null) and block_migration (a
// boolean, or "auto" — keel takes "auto" at every version, as its own
// tools send it), disk_over_commit before 2.25 and force from 2.30 to
// 2.67, nothing else.
func liveMigrateArgs(raw json.RawMessage, v Microversion) (liveMigrate, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return liveMigrate{}, badRequest("Invalid input for field/attribute os-migrateLive. Value: " + truncate(string(raw), 64) + " is not of type 'object'")
	}
	allowed := map[string]bool{"host": true, "block_migration": true}
	if v.less(Microversion{2, 25}) {
		allowed["disk_over_commit"] = true
	}
	if !v.less(Microversion{2, 30}) && v.less(Microversion{2, 68}) {
		allowed["force"] = true
	}
	for k := range m {
		if !allowed[k] {
			return liveMigrate{}, badRequest("Invalid input for field/attribute os-migrateLive. Additional properties are not allowed ('" + truncate(k, 64) + "' was unexpected)")
		}
	}
	for _, req := range []string{"block_migration", "host"} {
		if _, ok := m[req]; !ok {
			return liveMigrate{}, badRequest("Invalid input for field/attribute os-migrateLive. '" + req + "' is a required property")
		}
	}
	if err := boolValue("block_migration", m["block_migration"], true); err != nil {
		return liveMigrate{}, err
	}
	for _, f := range []string{"disk_over_commit", "force"} {
		if raw, ok := m[f]; ok {
			if err := boolValue(f, raw, false); err != nil {
				return liveMigrate{}, err
			}
		}
	}
	var out liveMigrate
	if string(m["host"]) != "null" {
		var h string
		if err := json.Unmarshal(m["host"], &h); err != nil {
			return liveMigrate{}, badRequest("Invalid input for field/attribute host. Value: " + truncate(string(m["host"]), 64) + " is not of type 'string', 'null'")
		}
		if h == "" || len(h) > 255 {
			return liveMigrate{}, badRequest("Invalid input for field/attribute host. Value: " + truncate(h, 64) + ". It must be a host name of 1 to 255 characters")
		}
		if err := checkPrintable("host", h); err != nil {
			return liveMigrate{}, err
		}
		out.Host = &h
	}
	return out, nil
}

// checkFlavorID refuses a flavor id Nova's pattern does not match (1 to 255
// of letters, digits, '.', '_', '-' and inner spaces), and "." and "..",
// which no URL path can name.
func checkFlavorID(id string) error {
	bad := func(why string) error {
		return badRequest(fmt.Sprintf("Invalid input for field/attribute id. Value: %q. %s", truncate(id, 64), why))
	}
	if id == "" || len(id) > 255 {
		return bad("It must have 1 to 255 characters")
	}
	if id == "." || id == ".." {
		return bad("It cannot be '.' or '..'")
	}
	if strings.TrimSpace(id) != id {
		return bad("It has leading or trailing whitespace")
	}
	for _, r := range id {
		if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '.' || r == '_' || r == '-' || r == ' ')) {
			return bad("Only letters, digits, '.', '_', '-' and spaces are allowed")
		}
	}
	return nil
}

// checkRxTx refuses an rxtx_factor that is not a number above 0.
func checkRxTx(v any) error {
	switch x := v.(type) {
	case nil:
		return nil
	case float64:
		if x > 0 && x <= 3.40282e38 {
			return nil
		}
	case string:
		var f float64
		if _, err := fmt.Sscan(x, &f); err == nil && f > 0 && f <= 3.40282e38 {
			return nil
		}
	}
	return badRequest(fmt.Sprintf("Invalid input for field/attribute rxtx_factor. Value: %v. It must be a number above 0", v))
}

// serverStatuses are the statuses Nova's list filter knows.
var serverStatuses = []string{"ACTIVE", "BUILD", "DELETED", "ERROR", "HARD_REBOOT", "MIGRATING", "PASSWORD",
	"PAUSED", "REBOOT", "REBUILD", "RESCUE", "RESIZE", "REVERT_RESIZE", "SHELVED", "SHELVED_OFFLOADED",
	"SHUTOFF", "SOFT_DELETED", "SUSPENDED", "UNKNOWN", "VERIFY_RESIZE"}

// serverSortKeys are the sort keys Nova's server list accepts.
var serverSortKeys = []string{"access_ip_v4", "access_ip_v6", "auto_disk_config", "availability_zone",
	"config_drive", "created_at", "display_description", "display_name", "host", "hostname", "image_ref",
	"instance_type_id", "kernel_id", "key_name", "launch_index", "launched_at", "locked", "locked_by",
	"node", "power_state", "progress", "project_id", "ramdisk_id", "root_device_name", "task_state",
	"terminated_at", "updated_at", "user_id", "uuid", "vm_state"}

// checkListStatusAndSort refuses, as Nova does, a status filter no server
// can have (from 2.38; before, such a list is empty), and a sort key or
// direction Nova does not know.
func checkListStatusAndSort(q url.Values, v Microversion) error {
	if v.AtLeast(38) {
		for _, st := range q["status"] {
			if st != "" && !slices.Contains(serverStatuses, strings.ToUpper(st)) {
				return badRequest("Invalid status value")
			}
		}
	}
	for _, k := range q["sort_key"] {
		if !slices.Contains(serverSortKeys, k) {
			return badRequest("Invalid input for query parameters sort_key. Value: " + truncate(k, 64) + ". '" + truncate(k, 64) + "' is not one of the sort keys")
		}
	}
	for _, d := range q["sort_dir"] {
		if d != "asc" && d != "desc" {
			return badRequest("Invalid input for query parameters sort_dir. Value: " + truncate(d, 64) + ". '" + truncate(d, 64) + "' is not one of ['asc', 'desc']")
		}
	}
	return nil
}

// hostnamePattern is Nova's parameter_types.hostname pattern (2.90).
var hostnamePattern = regexp.MustCompile(`^[a-zA-Z0-9]+[a-zA-Z0-9-]*[a-zA-Z0-9]+$`)

// hostnameField reads the hostname of a create, update or rebuild body
// (2.90) and checks it as Nova's schema does: a string of 2 to 63
// characters of letters, digits and '-', not starting or ending with '-'.
func (b serverBody) hostnameField() (string, bool, error) {
	raw, ok := b["hostname"]
	if !ok {
		return "", false, nil
	}
	var h string
	if err := json.Unmarshal(raw, &h); err != nil {
		return "", false, badRequest("Invalid input for field/attribute hostname. Value: " + string(raw) + ". " + string(raw) + " is not of type 'string'")
	}
	bad := func(why string) error {
		return badRequest("Invalid input for field/attribute hostname. Value: " + h + ". '" + h + "' " + why)
	}
	switch n := utf8.RuneCountInString(h); {
	case n < 2:
		return "", false, bad("is too short")
	case n > 63:
		return "", false, bad("is too long")
	case !hostnamePattern.MatchString(h):
		return "", false, bad("does not match '" + hostnamePattern.String() + "'")
	}
	return h, true, nil
}
