package computeapi

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"keel/internal/image"
	"keel/internal/records"
)

// snapshotStates are the vm_states Nova snapshots a server in (with no
// task at work on it).
var snapshotStates = []records.VMState{records.VMActive, records.VMStopped, records.VMPaused, records.VMSuspended}

// snapshotArgs are createImage's and createBackup's arguments.
type snapshotArgs struct {
	Name       *string           `json:"name"`
	Metadata   map[string]string `json:"metadata"`
	BackupType *string           `json:"backup_type"`
	// Rotation is an integer, which Nova's schema also takes as a string
	// of digits.
	Rotation *jsonRaw `json:"rotation"`
}

// readSnapshotArgs validates createImage's (backup false) or
// createBackup's body as Nova's schemas do.
func readSnapshotArgs(raw jsonRaw, action string, backup bool) (snapshotArgs, int, error) {
	var args snapshotArgs
	if err := strictArgs(raw, &args, action); err != nil {
		return args, 0, err
	}
	if !backup && (args.BackupType != nil || args.Rotation != nil) {
		return args, 0, badRequest("Invalid input for field/attribute " + action + ". Value: " + string(raw) + ". Additional properties are not allowed")
	}
	if args.Name == nil {
		return args, 0, badRequest("Invalid input for field/attribute " + action + ". Value: " + string(raw) + ". 'name' is a required property")
	}
	if n := *args.Name; n == "" || len(n) > 255 || strings.TrimSpace(n) != n {
		return args, 0, badRequest("Invalid input for field/attribute name. Value: " + n + ". '" + n + "' is not a valid name (1 to 255 characters, no leading or trailing whitespace)")
	}
	for k, v := range args.Metadata {
		if k == "" || len(k) > 255 || len(v) > 255 {
			return args, 0, badRequest("Invalid input for field/attribute metadata: keys of 1 to 255 characters, values up to 255")
		}
	}
	if !backup {
		return args, 0, nil
	}
	if args.BackupType == nil {
		return args, 0, badRequest("Invalid input for field/attribute " + action + ". Value: " + string(raw) + ". 'backup_type' is a required property")
	}
	if args.Rotation == nil {
		return args, 0, badRequest("Invalid input for field/attribute " + action + ". Value: " + string(raw) + ". 'rotation' is a required property")
	}
	rot, err := strconv.Atoi(strings.Trim(string(*args.Rotation), `"`))
	if err != nil || rot < 0 {
		return args, 0, badRequest("Invalid input for field/attribute rotation. Value: " + string(*args.Rotation) + ". rotation must be an integer of 0 or more")
	}
	return args, rot, nil
}

// snapshot is the createImage action (backupType "") and createBackup:
// a new image of the caller's project from the server — private, with
// Nova's snapshot properties (image_type snapshot or backup,
// instance_uuid, base_image_ref, user_id, backup_type), the base image's
// own properties and formats, min_disk and min_ram, and the request's
// metadata over them — whose data is written at once and which is active when the
// call returns. A server in another state than ACTIVE, SHUTOFF, PAUSED or
// SUSPENDED, or with a task at work, is 409 with Nova's words. A backup
// then keeps the newest rotation backups of the server of that type and
// deletes the older ones. 202 with the image's Location, or from 2.45
// {"image_id": …}.
//
// The data is the server's image's: the guests keel's drivers run never
// write their disks (the fake driver keeps none; the QEMU and libvirt
// drivers boot keel's tiny guest or an overlay on the image it reads).
func (a *serverActionsAPI) snapshot(w http.ResponseWriter, r *http.Request, in records.Instance, action string, raw jsonRaw) error {
	backup := action == "createBackup"
	args, rotation, err := readSnapshotArgs(raw, action, backup)
	if err != nil {
		return err
	}
	if a.images == nil {
		return &apiError{http.StatusNotImplemented, "keel has no image service to write snapshots to."}
	}
	if !slices.Contains(snapshotStates, in.VMState) {
		return conflict("Cannot '" + action + "' instance " + in.UUID + " while it is in vm_state " + string(in.VMState))
	}
	if in.TaskState != records.TaskNone {
		return conflict("Cannot '" + action + "' instance " + in.UUID + " while it is in task_state " + string(in.TaskState))
	}
	c := caller(r)
	if in.Locked && !c.Admin {
		return conflict("Instance " + in.UUID + " is locked")
	}
	im := image.Image{ID: uuid.NewString(), Name: *args.Name, Visibility: "private", Owner: in.ProjectID,
		DiskFormat: "raw", ContainerFormat: "bare", MinDisk: in.Flavor.DiskGB, Properties: map[string]string{}}
	base, baseErr := a.images.Get(in.ImageRef)
	if baseErr == nil {
		maps.Copy(im.Properties, base.Properties)
		im.DiskFormat, im.ContainerFormat, im.MinRAM = base.DiskFormat, base.ContainerFormat, base.MinRAM
		im.MinDisk = max(im.MinDisk, base.MinDisk)
	}
	im.Properties["image_type"], im.Properties["instance_uuid"] = "snapshot", in.UUID
	im.Properties["base_image_ref"], im.Properties["user_id"] = in.ImageRef, c.UserID
	if backup {
		im.Properties["image_type"], im.Properties["backup_type"] = "backup", *args.BackupType
	}
	for _, k := range []string{"owner_specified.openstack.md5", "owner_specified.openstack.sha256", "owner_specified.openstack.object"} {
		delete(im.Properties, k)
	}
	// The request's metadata comes last, over Nova's own, as in Nova.
	maps.Copy(im.Properties, args.Metadata)
	if _, err := a.images.Create(im); err != nil {
		return fmt.Errorf("creating the snapshot image of %s: %w", in.UUID, err)
	}
	if err := a.writeSnapshot(im.ID, in.ImageRef, baseErr); err != nil {
		_ = a.images.Delete(im.ID)
		return fmt.Errorf("writing the snapshot of %s: %w", in.UUID, err)
	}
	act := "createImage"
	if backup {
		act = "createBackup"
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: act})
	kept := true
	if backup {
		if kept, err = a.rotateBackups(in.UUID, *args.BackupType, rotation, im.ID); err != nil {
			return err
		}
	}
	if version(r).AtLeast(45) {
		out := map[string]any{}
		if kept {
			out["image_id"] = im.ID
		}
		writeJSON(w, http.StatusAccepted, out)
		return nil
	}
	if kept {
		w.Header().Set("Location", a.imageURL+"/images/"+im.ID)
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// writeSnapshot uploads the snapshot's data: the base image's (empty if
// the server has none, or it was deleted since the boot).
func (a *serverActionsAPI) writeSnapshot(id, baseID string, baseErr error) error {
	var data io.Reader = strings.NewReader("")
	if baseErr == nil {
		f, err := a.images.Open(baseID)
		if err != nil && !errors.Is(err, image.ErrNotFound) {
			return err
		}
		if err == nil {
			defer f.Close()
			data = f
		}
	}
	_, err := a.images.Upload(id, data)
	return err
}

// rotateBackups keeps the newest rotation backups (of backupType) of
// server uuid and deletes the others, as Nova's rotation; it reports
// whether the new one (newID) is kept.
func (a *serverActionsAPI) rotateBackups(uuid, backupType string, rotation int, newID string) (bool, error) {
	all, err := a.images.List()
	if err != nil {
		return false, err
	}
	var backups []image.Image
	for _, im := range all {
		if im.Properties["image_type"] == "backup" && im.Properties["instance_uuid"] == uuid && im.Properties["backup_type"] == backupType {
			backups = append(backups, im)
		}
	}
	// Newest first; the new one first among those of the same second.
	slices.SortStableFunc(backups, func(x, y image.Image) int {
		if n := y.CreatedAt.Compare(x.CreatedAt); n != 0 {
			return n
		}
		switch newID {
		case x.ID:
			return -1
		case y.ID:
			return 1
		}
		return strings.Compare(y.ID, x.ID)
	})
	kept := true
	for i, im := range backups {
		if i < rotation {
			continue
		}
		if err := a.images.Delete(im.ID); err != nil && !errors.Is(err, image.ErrNotFound) {
			return false, fmt.Errorf("rotating the backups of %s: %w", uuid, err)
		}
		if im.ID == newID {
			kept = false
		}
	}
	return kept, nil
}
