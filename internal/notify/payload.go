package notify

import (
	"crypto/sha1"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"keel/internal/records"
)

// Object is a Nova versioned object as it goes on the wire
// (obj_to_primitive): its class name, namespace "nova", version and
// fields.
type Object struct {
	Name    string
	Version string
	Data    any
}

// MarshalJSON writes the nova_object.* keys.
func (o Object) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]any{
		"nova_object.name":      o.Name,
		"nova_object.namespace": "nova",
		"nova_object.version":   o.Version,
		"nova_object.data":      o.Data,
	})
}

// UnmarshalJSON reads the nova_object.* keys (Data as a JSON object,
// nested objects as maps).
func (o *Object) UnmarshalJSON(b []byte) error {
	var w struct {
		Name    string         `json:"nova_object.name"`
		Version string         `json:"nova_object.version"`
		Data    map[string]any `json:"nova_object.data"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	o.Name, o.Version, o.Data = w.Name, w.Version, w.Data
	return nil
}

// The payload classes keel sends and their versions in Nova 26 (Zed).
const (
	InstanceActionPayload           = "InstanceActionPayload"
	InstanceCreatePayload           = "InstanceCreatePayload"
	InstanceUpdatePayload           = "InstanceUpdatePayload"
	InstanceActionResizePrepPayload = "InstanceActionResizePrepPayload"
	InstanceActionRescuePayload     = "InstanceActionRescuePayload"
	InstanceActionRebuildPayload    = "InstanceActionRebuildPayload"
	InstanceActionSnapshotPayload   = "InstanceActionSnapshotPayload"
	ServiceStatusPayload            = "ServiceStatusPayload"
	ExceptionPayload                = "ExceptionPayload"
)

// Versions are the payload classes' versions (Nova 26), nested ones too.
var Versions = map[string]string{
	InstanceActionPayload:           "1.8",
	InstanceCreatePayload:           "1.12",
	InstanceUpdatePayload:           "2.0",
	InstanceActionResizePrepPayload: "1.3",
	InstanceActionRescuePayload:     "1.3",
	InstanceActionRebuildPayload:    "1.9",
	InstanceActionSnapshotPayload:   "1.9",
	ServiceStatusPayload:            "1.1",
	ExceptionPayload:                "1.1",
	"FlavorPayload":                 "1.4",
	"KeypairPayload":                "1.0",
	"InstanceStateUpdatePayload":    "1.0",
	"AuditPeriodPayload":            "1.0",
}

func object(name string, data any) Object {
	return Object{Name: name, Version: Versions[name], Data: data}
}

// novaTime is a DateTimeField's primitive: ISO 8601 to the second, UTC,
// or null.
func novaTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// nullable is s, or null when empty (Nova's nullable string fields).
func nullable[T comparable](v T) any {
	var zero T
	if v == zero {
		return nil
	}
	return v
}

// powerStates are Nova's power_state numbers as the notification enum
// names them.
var powerStates = map[int]string{
	records.PowerNoState: "pending", records.PowerRunning: "running", records.PowerPaused: "paused",
	records.PowerShutdown: "shutdown", records.PowerCrashed: "crashed", records.PowerSuspended: "suspended",
}

// flavorPayload is FlavorPayload 1.4 of f.
func flavorPayload(f records.Flavor) Object {
	specs := f.ExtraSpecs
	if specs == nil {
		specs = map[string]string{}
	}
	var projects any
	if f.Private {
		projects = append([]string{}, f.Projects...)
	}
	return object("FlavorPayload", map[string]any{
		"flavorid": f.ID, "name": f.Name, "memory_mb": f.RAMMB, "vcpus": f.VCPUs, "root_gb": f.DiskGB,
		"ephemeral_gb": 0, "swap": 0, "rxtx_factor": 1.0, "vcpu_weight": 0, "disabled": false,
		"is_public": !f.Private, "extra_specs": maps.Clone(specs), "projects": projects,
		"description": nullable(f.Description),
	})
}

// Initiator is who asked for what an event describes (Nova's
// action_initiator_user and _project, and the request ID).
type Initiator struct {
	UserID, ProjectID, RequestID string
}

// instanceData is InstancePayload's fields (1.8) of in.
func instanceData(in records.Instance, who Initiator) map[string]any {
	md := in.Metadata
	if md == nil {
		md = map[string]string{}
	}
	disk := "MANUAL"
	if in.DiskConfig == "AUTO" {
		disk = "AUTO"
	}
	var launched any
	if in.VMState != records.VMBuilding && in.VMState != records.VMError && in.Host != "" {
		launched = novaTime(in.CreatedAt)
	}
	return map[string]any{
		"uuid": in.UUID, "user_id": nullable(in.UserID), "tenant_id": nullable(in.ProjectID),
		"reservation_id": nullable(in.ReservationID), "display_name": in.Name,
		"display_description": nullable(in.Description), "host_name": in.Name,
		"host": nullable(in.Host), "node": nullable(in.Host), "os_type": nil, "architecture": nil,
		"availability_zone": nullable(in.Zone), "flavor": flavorPayload(in.Flavor),
		"image_uuid": nullable(in.ImageRef), "key_name": nullable(in.KeyName),
		"kernel_id": "", "ramdisk_id": "",
		"created_at": novaTime(in.CreatedAt), "launched_at": launched, "terminated_at": nil,
		"deleted_at": nil, "updated_at": novaTime(in.UpdatedAt),
		"state": string(in.VMState), "power_state": powerStates[records.PowerStateOf(in)],
		"task_state": nullable(string(in.TaskState)), "progress": 0,
		"ip_addresses": []any{}, "block_devices": nil,
		"metadata": maps.Clone(md), "locked": in.Locked, "auto_disk_config": disk,
		"request_id": nullable(who.RequestID), "action_initiator_user": nullable(who.UserID),
		"action_initiator_project": nullable(who.ProjectID), "locked_reason": nullable(in.LockedReason),
	}
}

// Fault is what went wrong, for an error event's exception payload.
type Fault struct {
	// Exception is the exception's class name as Nova would raise it
	// (MigrationError, BuildAbortException, …); Message its text.
	Exception, Message string
	// Function is the function that failed (Nova's wrapped function name).
	Function string
}

// exceptionPayload is ExceptionPayload 1.1 of f.
func exceptionPayload(f Fault) Object {
	return object(ExceptionPayload, map[string]any{
		"module_name": "keel.conductor", "function_name": f.Function, "exception": f.Exception,
		"exception_message": f.Message, "traceback": "",
	})
}

// actionPayload is InstanceActionPayload 1.8 (or a class extending it:
// name) of in, with fault when not nil.
func actionPayload(name string, in records.Instance, who Initiator, fault *Fault) Object {
	d := instanceData(in, who)
	d["fault"] = nil
	if fault != nil {
		d["fault"] = exceptionPayload(*fault)
	}
	switch name {
	case InstanceCreatePayload:
		keypairs := []any{}
		if in.KeyName != "" {
			keypairs = append(keypairs, object("KeypairPayload", map[string]any{
				"user_id": nullable(in.UserID), "name": in.KeyName, "public_key": nullable(in.KeyData),
				"fingerprint": nil, "type": "ssh",
			}))
		}
		d["keypairs"] = keypairs
		d["tags"] = append([]string{}, in.Tags...)
		d["trusted_image_certificates"] = certsOrNil(in.TrustedCerts)
		d["instance_name"] = instanceName(in)
	case InstanceActionRebuildPayload:
		d["trusted_image_certificates"] = certsOrNil(in.TrustedCerts)
	case InstanceActionRescuePayload:
		d["rescue_image_ref"] = nil
	case InstanceActionSnapshotPayload:
		d["snapshot_image_id"] = nil
		if in.Snapshot != nil {
			d["snapshot_image_id"] = in.Snapshot.ImageID
		}
	case InstanceActionResizePrepPayload:
		d["new_flavor"] = nil
		if in.ResizeFlavor != nil {
			d["new_flavor"] = flavorPayload(*in.ResizeFlavor)
		}
	}
	return object(name, d)
}

// instanceName is Nova's instance name (instance_name_template
// instance-%08x): keel has no integer IDs, so a hash of the UUID stands in.
func instanceName(in records.Instance) string {
	h := sha1.Sum([]byte(in.UUID))
	return fmt.Sprintf("instance-%02x%02x%02x%02x", h[0], h[1], h[2], h[3])
}

// updatePayload is InstanceUpdatePayload 2.0: in as it is now, with its
// state and task state before (old) and the audit period Nova reports
// (the current hour, as instance_usage_audit_period's default).
func updatePayload(old, in records.Instance, who Initiator, now time.Time) Object {
	d := instanceData(in, who)
	begin := now.UTC().Truncate(time.Hour)
	d["state_update"] = object("InstanceStateUpdatePayload", map[string]any{
		"old_state": nullable(string(old.VMState)), "state": nullable(string(in.VMState)),
		"old_task_state": nullable(string(old.TaskState)), "new_task_state": nullable(string(in.TaskState)),
	})
	d["audit_period"] = object("AuditPeriodPayload", map[string]any{
		"audit_period_beginning": novaTime(begin), "audit_period_ending": novaTime(now.UTC()),
	})
	d["old_display_name"] = nil
	if old.Name != in.Name {
		d["old_display_name"] = nullable(old.Name)
	}
	d["tags"] = append([]string{}, in.Tags...)
	return object(InstanceUpdatePayload, d)
}

// serviceVersion is the service version Nova 26 (Zed) reports.
const serviceVersion = 61

// servicePayload is ServiceStatusPayload 1.1 of s. keel's service records
// have no UUID: a name-based UUID of the host stands in, the same on
// every replica and every restart.
func servicePayload(s records.Service) Object {
	return object(ServiceStatusPayload, map[string]any{
		"host": s.Host, "binary": "nova-compute", "topic": "compute", "report_count": 0,
		"disabled": s.Disabled, "disabled_reason": nullable(s.DisabledReason),
		"availability_zone": nullable(s.Zone), "last_seen_up": novaTime(s.LastSeenUp),
		"forced_down": s.ForcedDown, "version": serviceVersion, "uuid": ServiceUUID(s.Host),
	})
}

// ServiceUUID is the UUID notifications give host's compute service: a
// version 5 UUID of the name in keel's namespace.
func ServiceUUID(host string) string {
	h := sha1.Sum([]byte("keel.service:" + host))
	h[6] = h[6]&0x0f | 0x50
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// certsOrNil is a payload's trusted_image_certificates: the ids, or null
// for none.
func certsOrNil(ids []string) any {
	if len(ids) == 0 {
		return nil
	}
	return append([]string{}, ids...)
}
