package records

import "time"

// VM states of the lifecycle actions (Nova's vm_state names).
const (
	VMStopped          VMState = "stopped"
	VMPaused           VMState = "paused"
	VMSuspended        VMState = "suspended"
	VMRescued          VMState = "rescued"
	VMShelved          VMState = "shelved"
	VMShelvedOffloaded VMState = "shelved_offloaded"
)

// Task states of the lifecycle actions (Nova's task_state names).
const (
	TaskPoweringOff        TaskState = "powering-off"
	TaskPoweringOn         TaskState = "powering-on"
	TaskRebooting          TaskState = "rebooting"
	TaskRebootingHard      TaskState = "rebooting_hard"
	TaskPausing            TaskState = "pausing"
	TaskUnpausing          TaskState = "unpausing"
	TaskSuspending         TaskState = "suspending"
	TaskResuming           TaskState = "resuming"
	TaskRescuing           TaskState = "rescuing"
	TaskUnrescuing         TaskState = "unrescuing"
	TaskShelving           TaskState = "shelving"
	TaskShelvingOffloading TaskState = "shelving_offloading"
	TaskUnshelving         TaskState = "unshelving"

	// A snapshot's (createImage, createBackup): accepted, the disk
	// captured and waiting for its upload, uploading; a shelve's own two
	// while it writes its snapshot.
	TaskImageSnapshot              TaskState = "image_snapshot"
	TaskImagePendingUpload         TaskState = "image_pending_upload"
	TaskImageUploading             TaskState = "image_uploading"
	TaskShelvingImagePendingUpload TaskState = "shelving_image_pending_upload"
	TaskShelvingImageUploading     TaskState = "shelving_image_uploading"
)

// Snapshot is the image a snapshot (createImage, createBackup, shelve)
// in flight writes the guest's disk to.
type Snapshot struct {
	// ImageID is the image, created queued by the API.
	ImageID string `json:"image_id"`
	// BackupType and Rotation are a createBackup's: once the image is
	// active only the newest Rotation backups of the instance of that
	// type are kept ("" for no rotation).
	BackupType string `json:"backup_type,omitempty"`
	Rotation   int    `json:"rotation,omitempty"`
}

// Power states (Nova's power_state numbers, as OS-EXT-STS:power_state
// shows them).
const (
	PowerNoState   = 0
	PowerRunning   = 1
	PowerPaused    = 3
	PowerShutdown  = 4
	PowerCrashed   = 6
	PowerSuspended = 7
)

// ActionPhase is a lifecycle action's step (package lifecycle names them).
type ActionPhase string

// Lifecycle is the part of an instance's record the lifecycle actions
// (package lifecycle) own: the lock, and the action in flight with the
// steps still to do, which recovery resumes from. It is embedded in
// Instance, so its fields sit in the instance's JSON.
type Lifecycle struct {
	// Locked, LockedBy ("owner" or "admin", as Nova's locked_by) and
	// LockedReason (compute API 2.73) are the server's lock.
	Locked       bool   `json:"locked,omitempty"`
	LockedBy     string `json:"locked_by,omitempty"`
	LockedReason string `json:"locked_reason,omitempty"`

	// Action is the lifecycle action in flight ("" for none): Nova's
	// instance action name (stop, reboot, shelve, …).
	Action string `json:"lifecycle_action,omitempty"`
	// ActionPhase is the action's step: agent (an agent operation, Ops[0],
	// on Host), release (the shelved instance's claim given back) or boot
	// (an unshelve booting through package boot).
	ActionPhase ActionPhase `json:"lifecycle_phase,omitempty"`
	// ActionOps are the agent operations still to do, the first in
	// flight.
	ActionOps []string `json:"lifecycle_ops,omitempty"`
	// ActionFrom is the vm_state the action started from.
	ActionFrom VMState `json:"lifecycle_from,omitempty"`
	// ActionStarted is when the action was accepted.
	ActionStarted time.Time `json:"lifecycle_started,omitzero"`
	// ActionError is why the last action failed ("" when it succeeded).
	ActionError string `json:"lifecycle_error,omitempty"`

	// PowerState is the guest's power state when the last action or cold
	// move ended (shown for an instance in ERROR or resized; other states
	// imply theirs).
	PowerState int `json:"power_state,omitempty"`
	// ShelvedAt is when the instance was shelved (shelved_offload_time
	// counts from it).
	ShelvedAt time.Time `json:"shelved_at,omitzero"`
	// Snapshot is the image the action in flight writes (nil for none).
	Snapshot *Snapshot `json:"snapshot,omitempty"`
	// ShelvedImage is the snapshot a shelve wrote, which the unshelve
	// boots the guest from and then deletes (Nova's shelved_image_id).
	ShelvedImage string `json:"shelved_image,omitempty"`
	// Rescue is what the guest boots while the server is rescued (set by
	// the rescue, cleared when the server leaves RESCUE); nil otherwise.
	Rescue *Rescue `json:"rescue,omitempty"`
}

// Rescue is a rescue's boot disk (os-rescue): the image it is made of,
// and for a stable-device rescue (Nova 2.87's, asked for by the image's
// hw_rescue_bus and hw_rescue_device properties) the bus and device it
// is attached on, the server's own disk kept where it is. Without Bus
// and Device it is Nova's legacy rescue: the rescue disk first, the
// server's disk second.
type Rescue struct {
	// ImageID is the rescue image: the request's rescue_image_ref, or
	// the server's own image ("" for keel's built-in guest).
	ImageID string `json:"image_id,omitempty"`
	// Bus is hw_rescue_bus (virtio, scsi, usb, ide, sata, fdc) and
	// Device hw_rescue_device (disk, cdrom, floppy, lun); either set
	// makes it a stable-device rescue (Nova's check_hw_rescue_props),
	// the other defaulting as Nova's (device disk; the bus the device
	// type's default).
	Bus    string `json:"bus,omitempty"`
	Device string `json:"device,omitempty"`
}

// Stable reports whether r is a stable-device rescue.
func (r *Rescue) Stable() bool { return r != nil && (r.Bus != "" || r.Device != "") }

// DiskImage is the image in's guest disk is made from: the snapshot of
// its shelve while it has one, else the image it was booted from.
func (in Instance) DiskImage() string {
	if in.ShelvedImage != "" {
		return in.ShelvedImage
	}
	return in.ImageRef
}

// PowerStateOf is the power state the compute API shows for in: the one
// its vm_state implies, or for an instance in ERROR (or waiting in
// VERIFY_RESIZE) the one its last action or move left.
func PowerStateOf(in Instance) int {
	switch in.VMState {
	case VMActive, VMRescued:
		return PowerRunning
	case VMPaused:
		return PowerPaused
	case VMSuspended:
		return PowerSuspended
	case VMStopped, VMShelved:
		return PowerShutdown
	case VMError:
		return in.PowerState
	case VMResized:
		// A stopped server's resize waits in VERIFY_RESIZE powered off.
		if in.PowerState != PowerNoState {
			return in.PowerState
		}
		return PowerRunning
	}
	return PowerNoState
}

// BuildStarted is when in's current boot began: its creation, or the
// unshelve that boots it again (the conductor's build timeout and the
// audit's build deadline count from it).
func (in Instance) BuildStarted() time.Time {
	if in.Action != "" && in.ActionStarted.After(in.CreatedAt) {
		return in.ActionStarted
	}
	return in.CreatedAt
}
