package conductor

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"keel/internal/compute"
	"keel/internal/image"
	"keel/internal/lifecycle"
	"keel/internal/records"
)

// SnapshotAPI is what a snapshot's upload asks of the agent whose host
// captured the guest's disk (snapshot_instance): its data, in chunks.
type SnapshotAPI interface {
	// ReadSnapshot returns up to length bytes of the capture at offset
	// (none at its end, after which the host removes it).
	ReadSnapshot(ctx context.Context, uuid, imageID string, offset int64, length int) (compute.SnapshotInfo, []byte, error)
}

// Images is the image service snapshots are written to (image.Store).
type Images interface {
	Get(id string) (image.Image, error)
	Update(id string, fn func(*image.Image) error) (image.Image, error)
	Upload(id string, r io.Reader) (image.Image, error)
	Delete(id string) error
	RotateBackups(instanceUUID, backupType string, keep int) ([]string, error)
}

var _ Images = (*image.Store)(nil)

// snapshotChunk is how much of a capture one read_snapshot call asks
// for (the bus's answers stay below its 1 MiB payload).
const snapshotChunk = 512 << 10

// snapshotEffects are the lifecycle machine's snapshot actions.
func (e *lifecycleEffects) snapshotEffects() map[lifecycle.ActionKind]func(context.Context, records.Instance, lifecycle.Action) (lifecycle.Event, bool, error) {
	return map[lifecycle.ActionKind]func(context.Context, records.Instance, lifecycle.Action) (lifecycle.Event, bool, error){
		lifecycle.PrepareUpload: e.prepareUpload,
		lifecycle.UploadImage:   e.uploadImage,
	}
}

// snapshotImage returns the snapshot's image, or the event that fails
// the action when there is none to write (no image service, or the image
// was deleted meanwhile, as Nova's snapshot fails on ImageNotFound).
func (e *lifecycleEffects) snapshotImage(inst records.Instance, id string) (image.Image, *lifecycle.Event, error) {
	if e.images == nil {
		return image.Image{}, &lifecycle.Event{Kind: lifecycle.Failed, Err: "this server keeps no images"}, nil
	}
	im, err := e.images.Get(id)
	if errors.Is(err, image.ErrNotFound) {
		return im, &lifecycle.Event{Kind: lifecycle.Failed, Err: fmt.Sprintf("image %s was deleted during the snapshot of %s", id, inst.UUID)}, nil
	}
	return im, nil, err
}

// prepareUpload checks that the snapshot's image still waits for its
// data and gives it the captured disk's format, which the agent tells.
func (e *lifecycleEffects) prepareUpload(ctx context.Context, inst records.Instance, a lifecycle.Action) (lifecycle.Event, bool, error) {
	im, fail, err := e.snapshotImage(inst, a.Image)
	if fail != nil || err != nil {
		return evOr(fail), fail != nil, err
	}
	if im.Status != image.StatusQueued {
		return lifecycle.Event{Kind: lifecycle.Prepared}, true, nil // an upload began (a repeat)
	}
	api, err := e.snapshotAPI(inst)
	if err != nil {
		return lifecycle.Event{}, false, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	info, _, err := api.ReadSnapshot(cctx, inst.UUID, a.Image, 0, 1)
	cancel()
	switch {
	case err != nil && unreachable(err):
		return lifecycle.Event{}, false, fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
	case err != nil:
		return lifecycle.Event{Kind: lifecycle.Failed, Err: err.Error()}, true, nil
	}
	if _, err := e.images.Update(a.Image, func(im *image.Image) error {
		if im.Status == image.StatusQueued {
			im.DiskFormat = info.DiskFormat
		}
		return nil
	}); errors.Is(err, image.ErrNotFound) {
		return lifecycle.Event{Kind: lifecycle.Failed, Err: fmt.Sprintf("image %s was deleted during the snapshot of %s", a.Image, inst.UUID)}, true, nil
	} else if err != nil {
		return lifecycle.Event{}, false, fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
	}
	return lifecycle.Event{Kind: lifecycle.Prepared}, true, nil
}

// uploadImage stores the captured disk as the image's data, read from
// the agent chunk by chunk, then keeps a backup's newest rotation
// backups of the instance (Nova's rotation). An image active already
// was stored by a run a restart cut short; one being stored by another
// replica is left to it (the step is repeated later).
func (e *lifecycleEffects) uploadImage(ctx context.Context, inst records.Instance, a lifecycle.Action) (lifecycle.Event, bool, error) {
	im, fail, err := e.snapshotImage(inst, a.Image)
	if fail != nil || err != nil {
		return evOr(fail), fail != nil, err
	}
	if im.Status != image.StatusActive {
		api, err := e.snapshotAPI(inst)
		if err != nil {
			return lifecycle.Event{}, false, err
		}
		r := &captureReader{ctx: ctx, api: api, uuid: inst.UUID, image: a.Image}
		_, err = e.images.Upload(a.Image, bufio.NewReaderSize(r, snapshotChunk))
		switch {
		case errors.Is(err, image.ErrBusy), err != nil && r.lost:
			return lifecycle.Event{}, false, fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
		case errors.Is(err, image.ErrNotFound):
			return lifecycle.Event{Kind: lifecycle.Failed, Err: fmt.Sprintf("image %s was deleted during the snapshot of %s", a.Image, inst.UUID)}, true, nil
		case err != nil:
			return lifecycle.Event{Kind: lifecycle.Failed, Err: fmt.Sprintf("storing the snapshot of %s: %v", inst.UUID, err)}, true, nil
		}
	}
	if sn := inst.Snapshot; sn != nil && sn.BackupType != "" {
		deleted, err := e.images.RotateBackups(inst.UUID, sn.BackupType, sn.Rotation)
		if err != nil {
			// The backup is stored: an older one left behind is logged.
			e.log.Warn("rotating backups", "instance", inst.UUID, "backup_type", sn.BackupType, "err", err)
		}
		if len(deleted) > 0 {
			e.log.Info("rotated backups", "instance", inst.UUID, "backup_type", sn.BackupType, "deleted", deleted)
		}
	}
	return lifecycle.Event{Kind: lifecycle.Done}, true, nil
}

// dropImage deletes an image the action no longer needs (a failed
// snapshot's, an unshelved server's shelved image). It needs no instance:
// it runs after the action ended, even after the instance was deleted.
func (e *lifecycleEffects) dropImage(a lifecycle.Action) error {
	if e.images == nil || a.Image == "" {
		return nil
	}
	if err := e.images.Delete(a.Image); err != nil && !errors.Is(err, image.ErrNotFound) {
		return fmt.Errorf("deleting image %s: %w", a.Image, err)
	}
	return nil
}

// dropImagesOf deletes, with a deleted instance, the image its snapshot
// in flight was writing and its shelve's image (logged if it cannot).
func (e *lifecycleEffects) dropImagesOf(inst records.Instance) {
	ids := []string{inst.ShelvedImage}
	if inst.Snapshot != nil {
		ids = append(ids, inst.Snapshot.ImageID)
	}
	for _, id := range ids {
		if err := e.dropImage(lifecycle.Action{Kind: lifecycle.DropImage, Image: id}); err != nil {
			e.log.Warn("deleting the image of a deleted instance", "instance", inst.UUID, "image", id, "err", err)
		}
	}
}

func evOr(ev *lifecycle.Event) lifecycle.Event {
	if ev == nil {
		return lifecycle.Event{}
	}
	return *ev
}

// snapshotAPI is the agent of inst's host, as a snapshot's upload reads it.
func (e *lifecycleEffects) snapshotAPI(inst records.Instance) (SnapshotAPI, error) {
	api, err := e.agents.compute(inst.Host)
	if err != nil {
		return nil, fmt.Errorf("snapshot of %s: %w", inst.UUID, err)
	}
	sa, ok := api.(SnapshotAPI)
	if !ok {
		return nil, fmt.Errorf("snapshot of %s: the agent of %s cannot read snapshots", inst.UUID, inst.Host)
	}
	return sa, nil
}

// captureReader reads a host's capture over the bus (each call bounded
// to 30 s); it checks the capture's size at its end. lost says a call
// found no agent (the upload is repeated later).
type captureReader struct {
	ctx         context.Context
	api         SnapshotAPI
	uuid, image string
	off         int64
	info        *compute.SnapshotInfo
	lost        bool
}

func (r *captureReader) Read(p []byte) (int, error) {
	cctx, cancel := context.WithTimeout(r.ctx, 30*time.Second)
	info, data, err := r.api.ReadSnapshot(cctx, r.uuid, r.image, r.off, min(len(p), snapshotChunk))
	cancel()
	if err != nil {
		r.lost = unreachable(err)
		return 0, fmt.Errorf("reading the snapshot of %s at %d: %w", r.uuid, r.off, err)
	}
	if r.info == nil {
		r.info = &info
	} else if info != *r.info {
		return 0, fmt.Errorf("the snapshot of %s changed while it was read (%+v, then %+v)", r.uuid, *r.info, info)
	}
	if len(data) == 0 {
		if r.off != info.Size {
			return 0, fmt.Errorf("the snapshot of %s: read %d bytes, its size is %d", r.uuid, r.off, info.Size)
		}
		return 0, io.EOF
	}
	n := copy(p, data)
	r.off += int64(n)
	return n, nil
}
