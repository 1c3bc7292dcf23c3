package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"keel/internal/bus"
	"keel/internal/compute"
	"keel/internal/placement"
	"keel/internal/store"
)

// The real drivers boot an uploaded image from a copy on their host
// (guestdisk.Images): the agent reads the image's data from the servers'
// image store over the bus, in chunks (read_image). A server answers
// only the host an instance concerns, and only for the image that
// instance boots from.

// mReadImage is the conductor method that reads a chunk of an image's
// data.
const mReadImage = "read_image"

// ImageChunkMax bounds one read_image answer's data (its JSON, base64,
// stays well below the bus's 1 MiB payload).
const ImageChunkMax = 512 << 10

// ImageReader is the servers' image store as read_image serves it.
type ImageReader interface {
	// ReadImage reads up to len(p) bytes of active image id's data at
	// offset into p and returns the image's description and how many
	// bytes it read (0 at the end). An image that is not there or not
	// active wraps store.ErrNotFound.
	ReadImage(ctx context.Context, id string, offset int64, p []byte) (compute.ImageInfo, int, error)
}

type imageArgs struct {
	Host         string `json:"host"`
	InstanceUUID string `json:"instance_uuid"`
	ImageID      string `json:"image_id"`
	Offset       int64  `json:"offset"`
	Length       int    `json:"length"`
}

type imageChunk struct {
	Info compute.ImageInfo `json:"info"`
	Data []byte            `json:"data"`
}

// serveReadImage is read_image's handler: the call must concern the
// sender's host and an instance there (concernsSender), which exists and
// boots from the image asked for (its DiskImage: a shelved server's
// snapshot while it has one) or was booted from at first (its ImageRef,
// which an unshelved guest's disk is rebased onto).
func serveReadImage(st ServedStore, images ImageReader, log *slog.Logger) bus.Handler {
	return checked(st, log, mReadImage, func(a imageArgs) about { return onHost(a.Host).withInstance(a.InstanceUUID) },
		func(ctx context.Context, a imageArgs) (any, error) {
			if images == nil {
				return nil, fmt.Errorf("read_image: this server keeps no images")
			}
			if a.Offset < 0 || a.Length <= 0 {
				return nil, &placement.InvalidError{Msg: fmt.Sprintf("read_image: offset %d, length %d", a.Offset, a.Length)}
			}
			inst, err := st.GetInstance(ctx, a.InstanceUUID)
			if errors.Is(err, store.ErrNotFound) {
				return nil, forbidden("host %q may not read image %s for instance %s: there is no such instance", a.Host, a.ImageID, a.InstanceUUID)
			}
			if err != nil {
				return nil, fmt.Errorf("read_image: %w", err)
			}
			if inst.DiskImage() != a.ImageID && inst.ImageRef != a.ImageID {
				if log != nil {
					log.Warn("refused an agent's read of an image its instance does not boot from", "from", sender(ctx), "instance", a.InstanceUUID, "image", a.ImageID)
				}
				return nil, forbidden("host %q may not read image %s for instance %s, which boots from %q", a.Host, a.ImageID, a.InstanceUUID, inst.DiskImage())
			}
			buf := make([]byte, min(a.Length, ImageChunkMax))
			info, n, err := images.ReadImage(ctx, a.ImageID, a.Offset, buf)
			if err != nil {
				return nil, fmt.Errorf("read_image %s: %w", a.ImageID, err)
			}
			return imageChunk{Info: info, Data: buf[:n]}, nil
		})
}

var _ compute.ImageSource = (*Store)(nil)

// FetchImage implements compute.ImageSource: it reads image imageID's
// data chunk by chunk (read_image, each call bounded to 30 s) and writes
// it to w. The image must not change meanwhile (its checksum and size
// are compared at each chunk), and the data must add up to its size.
func (s *Store) FetchImage(ctx context.Context, instanceUUID, imageID string, w io.Writer) (compute.ImageInfo, error) {
	var first compute.ImageInfo
	var off int64
	for i := 0; ; i++ {
		var c imageChunk
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := s.call(cctx, mReadImage, imageArgs{Host: s.Host, InstanceUUID: instanceUUID, ImageID: imageID, Offset: off, Length: ImageChunkMax}, &c)
		cancel()
		if err != nil {
			return first, fmt.Errorf("reading image %s at %d: %w", imageID, off, err)
		}
		if i == 0 {
			first = c.Info
		} else if c.Info != first {
			return first, fmt.Errorf("image %s changed while it was read (%+v, then %+v)", imageID, first, c.Info)
		}
		if len(c.Data) == 0 {
			break
		}
		if _, err := w.Write(c.Data); err != nil {
			return first, fmt.Errorf("writing image %s: %w", imageID, err)
		}
		off += int64(len(c.Data))
	}
	if off != first.Size {
		return first, fmt.Errorf("image %s: read %d bytes, its size is %d", imageID, off, first.Size)
	}
	return first, nil
}
