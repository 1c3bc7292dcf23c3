package guestdisk

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/google/uuid"
)

// ImageInfo describes an image's data as the servers keep it.
type ImageInfo struct {
	ID string `json:"id"`
	// DiskFormat is Glance's disk_format: raw or qcow2 for what the real
	// drivers boot.
	DiskFormat string `json:"disk_format"`
	Size       int64  `json:"size"`
	// Checksum is the data's MD5, in hex.
	Checksum string `json:"checksum"`
}

// ImageSource gives the data of the image an instance boots from.
type ImageSource interface {
	// FetchImage writes image imageID's data, which instance
	// instanceUUID boots from, to w.
	FetchImage(ctx context.Context, instanceUUID, imageID string, w io.Writer) (ImageInfo, error)
}

// BaseDir is the directory, beside the guests' own in a driver's
// directory, that keeps the images the host's guests boot from.
const BaseDir = "_base"

// Images keeps, in a driver directory's _base, one raw copy of each image
// the host's guests boot from — fetched once from the servers, checked
// against its MD5, a qcow2 converted with qemu-img — and makes each
// guest's disk a qcow2 overlay on it, so the base is never written and
// is shared by every guest of the image (copy-on-write, as Nova's
// default image backend).
type Images struct {
	// Dir is the driver's directory (the guests' directories' parent).
	Dir string
	// Source gives the images' data.
	Source ImageSource
	// QEMUImg is the qemu-img to run (default "qemu-img", on PATH).
	QEMUImg string

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (c *Images) qemuImg() string {
	if c.QEMUImg == "" {
		return "qemu-img"
	}
	return c.QEMUImg
}

// lock serialises the fetches of one image.
func (c *Images) lock(id string) func() {
	c.mu.Lock()
	if c.locks == nil {
		c.locks = map[string]*sync.Mutex{}
	}
	l, ok := c.locks[id]
	if !ok {
		l = &sync.Mutex{}
		c.locks[id] = l
	}
	c.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// Base returns the path of image imageID's raw copy in the cache,
// fetching it first (for instance instanceUUID, which boots from it) if
// the host has none yet. A fetch that fails or does not match its
// checksum leaves nothing in the cache.
func (c *Images) Base(ctx context.Context, instanceUUID, imageID string) (string, error) {
	if uuid.Validate(imageID) != nil || strings.ContainsAny(imageID, `/\.`) {
		return "", fmt.Errorf("image id %q is not a UUID", imageID)
	}
	if c.Source == nil {
		return "", fmt.Errorf("image %s: this agent has no image source", imageID)
	}
	dir := filepath.Join(c.Dir, BaseDir)
	path := filepath.Join(dir, imageID)
	unlock := c.lock(imageID)
	defer unlock()
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	tmp, err := os.CreateTemp(dir, "."+imageID+".fetch.*")
	if err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	defer os.Remove(tmp.Name())
	sum := md5.New()
	info, err := c.Source.FetchImage(ctx, instanceUUID, imageID, io.MultiWriter(tmp, sum))
	if err = errors.Join(err, tmp.Close()); err != nil {
		return "", fmt.Errorf("fetching image %s: %w", imageID, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); info.Checksum != "" && got != info.Checksum {
		return "", fmt.Errorf("fetching image %s: its data's MD5 is %s, the image's checksum %s", imageID, got, info.Checksum)
	}
	src := tmp.Name()
	switch info.DiskFormat {
	case "raw":
	case "qcow2":
		if err := c.checkQCOW2(ctx, src); err != nil {
			return "", fmt.Errorf("image %s: %w", imageID, err)
		}
		raw := src + ".raw"
		defer os.Remove(raw)
		if out, err := exec.CommandContext(ctx, c.qemuImg(), "convert", "-q", "-f", "qcow2", "-O", "raw", src, raw).CombinedOutput(); err != nil {
			return "", fmt.Errorf("converting image %s from qcow2: %w: %s", imageID, err, strings.TrimSpace(string(out)))
		}
		src = raw
	default:
		return "", fmt.Errorf("image %s has disk_format %q: the real drivers boot raw and qcow2 images", imageID, info.DiskFormat)
	}
	if err := os.Rename(src, path); err != nil {
		return "", fmt.Errorf("image cache: %w", err)
	}
	return path, nil
}

// checkQCOW2 refuses a qcow2 image that names a backing or data file: an
// uploaded image must not make qemu-img read another file of the host.
func (c *Images) checkQCOW2(ctx context.Context, path string) error {
	out, err := exec.CommandContext(ctx, c.qemuImg(), "info", "--output=json", "-f", "qcow2", path).Output()
	if err != nil {
		return fmt.Errorf("not a qcow2 image (qemu-img info: %w)", err)
	}
	var info struct {
		Backing  string `json:"backing-filename"`
		Specific struct {
			Data struct {
				DataFile string `json:"data-file"`
			} `json:"data"`
		} `json:"format-specific"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return fmt.Errorf("reading qemu-img info: %w", err)
	}
	if info.Backing != "" {
		return fmt.Errorf("refused: the qcow2 image names a backing file (%q); an image must be whole", info.Backing)
	}
	if info.Specific.Data.DataFile != "" {
		return fmt.Errorf("refused: the qcow2 image names an external data file (%q); an image must be whole", info.Specific.Data.DataFile)
	}
	return nil
}

// Overlay makes disk a new qcow2 overlay on base (a raw image), its
// backing file named relative to disk's directory, so the overlay stays
// valid in another driver directory of the same layout (a cold move's
// destination, once it has the base).
func (c *Images) Overlay(ctx context.Context, base, disk string) error {
	rel, err := filepath.Rel(filepath.Dir(disk), base)
	if err != nil {
		return fmt.Errorf("overlay of %s: %w", base, err)
	}
	if err := os.Remove(disk); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("overlay: %w", err)
	}
	if out, err := exec.CommandContext(ctx, c.qemuImg(), "create", "-q", "-f", "qcow2", "-F", "raw", "-b", rel, disk).CombinedOutput(); err != nil {
		return fmt.Errorf("creating the overlay %s on %s: %w: %s", disk, base, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Capture writes disk (of format raw, or a qcow2 overlay on a base) to
// out as one whole qcow2 image — no backing file, the base's data
// included — by qemu-img convert, through a temporary file renamed into
// place, so out is either whole or absent. It reads with -U (no image
// lock): the caller makes sure nothing writes disk meanwhile (its guest
// paused or stopped).
func (c *Images) Capture(ctx context.Context, disk, format, out string) error {
	part := out + ".part"
	defer os.Remove(part)
	if o, err := exec.CommandContext(ctx, c.qemuImg(), "convert", "-q", "-U", "-f", format, "-O", "qcow2", disk, part).CombinedOutput(); err != nil {
		return fmt.Errorf("capturing %s: %w: %s", disk, err, strings.TrimSpace(string(o)))
	}
	if err := os.Rename(part, out); err != nil {
		return fmt.Errorf("capturing %s: %w", disk, err)
	}
	return nil
}

// Unshelved makes disk — an overlay just made on a shelved server's
// snapshot, which the unshelve deletes once the guest runs — independent
// of that snapshot, as Nova's unshelve rebases its disk: onto the base of
// the uploaded image the server was booted from (original, fetched if the
// host has none), or made whole when that image can no longer be had.
// For keel's own guest (original "") the disk becomes raw again, the
// format its guest boots from. A later cold move's destination then
// fetches the base the disk names (BaseOf), which still exists, or none.
func (c *Images) Unshelved(ctx context.Context, instanceUUID, disk, original string) error {
	var args []string
	switch base, err := c.Base(ctx, instanceUUID, original); {
	case original == "":
		part := disk + ".raw.part"
		defer os.Remove(part)
		if out, err := exec.CommandContext(ctx, c.qemuImg(), "convert", "-q", "-f", "qcow2", "-O", "raw", disk, part).CombinedOutput(); err != nil {
			return fmt.Errorf("making %s raw: %w: %s", disk, err, strings.TrimSpace(string(out)))
		}
		return os.Rename(part, disk)
	case err != nil:
		args = []string{"rebase", "-q", "-f", "qcow2", "-b", ""} // whole
	default:
		rel, err := filepath.Rel(filepath.Dir(disk), base)
		if err != nil {
			return fmt.Errorf("rebasing %s: %w", disk, err)
		}
		args = []string{"rebase", "-q", "-f", "qcow2", "-b", rel, "-F", "raw"}
	}
	cmd := exec.CommandContext(ctx, c.qemuImg(), append(args, filepath.Base(disk))...)
	cmd.Dir = filepath.Dir(disk) // a relative backing is read from the disk's directory
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("rebasing %s (%s): %w: %s", disk, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// BaseOf fetches the base disk (a moved guest's qcow2 overlay) names, if
// the host has none yet, and returns its image ("" for a disk that names
// no base: keel's guest's raw disk, a whole qcow2).
func (c *Images) BaseOf(ctx context.Context, instanceUUID, disk string) (string, error) {
	out, err := exec.CommandContext(ctx, c.qemuImg(), "info", "-U", "--output=json", disk).Output()
	if err != nil {
		return "", fmt.Errorf("reading %s (qemu-img info: %w)", disk, err)
	}
	var info struct {
		Backing string `json:"backing-filename"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return "", fmt.Errorf("reading qemu-img info of %s: %w", disk, err)
	}
	if info.Backing == "" {
		return "", nil
	}
	if filepath.Base(filepath.Dir(info.Backing)) != BaseDir {
		return "", fmt.Errorf("%s names a backing file outside %s: %q", disk, BaseDir, info.Backing)
	}
	image := filepath.Base(info.Backing)
	if _, err := c.Base(ctx, instanceUUID, image); err != nil {
		if ferr := c.baseFromSource(image, disk); ferr != nil {
			return "", errors.Join(err, ferr)
		}
	}
	_ = os.Remove(disk + SourceBaseSuffix)
	return image, nil
}

// SourceBaseSuffix names, beside a moved disk, the file in which the
// cold move's source says where its copy of the disk's base is
// (NoteSourceBase).
const SourceBaseSuffix = ".source-base"

// NoteSourceBase is the cold move source's part in Nova's fallback: when
// the disk it copied to to names a base, the path of its own copy of
// that base is written beside to, so that the destination, if the image
// service no longer has the image (deleted since the guest booted),
// copies the base from this host instead (BaseOf). The hosts' driver
// directories share one filesystem namespace, as the disk's own copy
// needs.
func (c *Images) NoteSourceBase(ctx context.Context, disk, to string) error {
	out, err := exec.CommandContext(ctx, c.qemuImg(), "info", "-U", "--output=json", disk).Output()
	if err != nil {
		return fmt.Errorf("reading %s (qemu-img info: %w)", disk, err)
	}
	var info struct {
		Backing string `json:"backing-filename"`
	}
	if err := json.Unmarshal(out, &info); err != nil || info.Backing == "" {
		return err
	}
	base := info.Backing
	if !filepath.IsAbs(base) {
		base = filepath.Join(filepath.Dir(disk), base)
	}
	base, err = filepath.Abs(base)
	if err != nil {
		return err
	}
	tmp := to + SourceBaseSuffix + ".part"
	if err := os.WriteFile(tmp, []byte(base), 0o600); err != nil {
		return fmt.Errorf("noting the source's base: %w", err)
	}
	return os.Rename(tmp, to+SourceBaseSuffix)
}

// baseFromSource copies image's base from the cold move's source host,
// as its note beside disk names it: only a regular file named for the
// image in another driver directory's BaseDir is taken.
func (c *Images) baseFromSource(image, disk string) error {
	data, err := os.ReadFile(disk + SourceBaseSuffix)
	if err != nil {
		return fmt.Errorf("no copy of the base on the move's source either (%w)", err)
	}
	from := string(data)
	if !filepath.IsAbs(from) || filepath.Clean(from) != from || filepath.Base(from) != image || filepath.Base(filepath.Dir(from)) != BaseDir {
		return fmt.Errorf("the move's source names %q as the base of image %s: refused", from, image)
	}
	if fi, err := os.Lstat(from); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("the move's source's base %s: not a regular file (%v)", from, err)
	}
	unlock := c.lock(image)
	defer unlock()
	to := filepath.Join(c.Dir, BaseDir, image)
	if _, err := os.Stat(to); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("image cache: %w", err)
	}
	if err := Copy(from, to); err != nil {
		return fmt.Errorf("copying the base of image %s from the move's source: %w", image, err)
	}
	return nil
}
