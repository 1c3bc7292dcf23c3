package computeapi

import (
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"keel/internal/image"
	"keel/internal/lifecycle"
	"keel/internal/records"
)

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

// snapshot is the createImage action (backupType "") and createBackup,
// as Nova's: a new image of the server's project, created queued —
// private, with Nova's snapshot properties (image_type snapshot or
// backup, instance_uuid, base_image_ref, user_id, backup_type), the base
// image's own properties and formats, min_disk and min_ram, and the
// request's metadata over them — and the snapshot started as a lifecycle
// action (task image_snapshot): the server's host captures its disk and
// the conductor stores it in the image, which becomes active (saving
// meanwhile), then a backup's older backups are rotated. A server in
// another state than ACTIVE, SHUTOFF, PAUSED or SUSPENDED, or with a
// task at work (another snapshot among them), is 409 with Nova's words,
// and the image is deleted again. 202 with the image's Location, or from
// 2.45 {"image_id": …} (a backup with rotation 0, which will not be
// kept, names none).
func (a *serverActionsAPI) snapshot(w http.ResponseWriter, r *http.Request, in records.Instance, action string, raw jsonRaw) error {
	backup := action == "createBackup"
	args, rotation, err := readSnapshotArgs(raw, action, backup)
	if err != nil {
		return err
	}
	if a.images == nil {
		return &apiError{http.StatusNotImplemented, "keel has no image service to write snapshots to."}
	}
	c := caller(r)
	req := lifecycle.Request{Action: lifecycle.CreateImage, Admin: c.Admin}
	if backup {
		req.Action = lifecycle.CreateBackup
	}
	// The state first, so a refused snapshot makes no image (the
	// conductor checks again as it saves the action).
	if err := lifecycle.CheckLock(in, c.Admin); err != nil {
		return conflict(err.Error())
	}
	if err := lifecycle.CheckState(in, action, lifecycle.Rules[req.Action]); err != nil {
		return conflict(err.Error())
	}
	im, err := a.snapshotImage(in, *args.Name, c.UserID, backup, args)
	if err != nil {
		return err
	}
	req.Snapshot = &records.Snapshot{ImageID: im.ID}
	if backup {
		req.Snapshot.BackupType, req.Snapshot.Rotation = *args.BackupType, rotation
	}
	if _, _, err := a.conductor.Act(r.Context(), in.UUID, req); err != nil {
		_ = a.images.Delete(im.ID)
		return err
	}
	a.recordAction(w, r, records.InstanceAction{InstanceUUID: in.UUID, Action: action})
	kept := !backup || rotation > 0
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

// snapshotImage creates the queued image a snapshot of in writes (also
// a shelve's, named by the caller), with Nova's snapshot properties.
func (a *serverActionsAPI) snapshotImage(in records.Instance, name, userID string, backup bool, args snapshotArgs) (image.Image, error) {
	im := image.Image{ID: uuid.NewString(), Name: name, Visibility: "private", Owner: in.ProjectID,
		DiskFormat: "raw", ContainerFormat: "bare", MinDisk: in.Flavor.DiskGB, Properties: map[string]string{}}
	if base, err := a.images.Get(in.ImageRef); err == nil {
		maps.Copy(im.Properties, base.Properties)
		im.DiskFormat, im.ContainerFormat, im.MinRAM = base.DiskFormat, base.ContainerFormat, base.MinRAM
		im.MinDisk = max(im.MinDisk, base.MinDisk)
	}
	im.Properties["image_type"], im.Properties["instance_uuid"] = "snapshot", in.UUID
	im.Properties["base_image_ref"], im.Properties["user_id"] = in.ImageRef, userID
	if backup {
		im.Properties["image_type"], im.Properties["backup_type"] = "backup", *args.BackupType
	}
	for _, k := range []string{"owner_specified.openstack.md5", "owner_specified.openstack.sha256", "owner_specified.openstack.object"} {
		delete(im.Properties, k)
	}
	// The request's metadata comes last, over Nova's own, as in Nova.
	maps.Copy(im.Properties, args.Metadata)
	out, err := a.images.Create(im)
	if err != nil {
		return out, fmt.Errorf("creating the snapshot image of %s: %w", in.UUID, err)
	}
	return out, nil
}
