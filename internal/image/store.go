package image

import (
	"crypto/md5"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
)

// Image statuses, Glance's.
const (
	StatusQueued = "queued"
	StatusSaving = "saving"
	StatusActive = "active"
)

// Image is an image's record.
type Image struct {
	ID              string `json:"id"`
	Name            string `json:"name,omitempty"`
	Status          string `json:"status"`
	Visibility      string `json:"visibility"`
	Protected       bool   `json:"protected"`
	Hidden          bool   `json:"os_hidden"`
	Owner           string `json:"owner"`
	DiskFormat      string `json:"disk_format,omitempty"`
	ContainerFormat string `json:"container_format,omitempty"`
	MinDisk         int64  `json:"min_disk"`
	MinRAM          int64  `json:"min_ram"`
	Size            *int64 `json:"size,omitempty"`
	// VirtualSize is the size in bytes of the disk the data holds (the
	// data's own size for raw and iso, the header's for qcow2), unknown
	// (nil) for other formats, as Glance's.
	VirtualSize *int64            `json:"virtual_size,omitempty"`
	Checksum    string            `json:"checksum,omitempty"`
	HashAlgo    string            `json:"os_hash_algo,omitempty"`
	HashValue   string            `json:"os_hash_value,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
	Properties  map[string]string `json:"properties,omitempty"`
	// Members are the projects a shared image is shared with.
	Members   []Member  `json:"members,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Member statuses, Glance's: a member sees the shared image listed once
// it accepted it.
const (
	MemberPending  = "pending"
	MemberAccepted = "accepted"
	MemberRejected = "rejected"
)

// Member is a project a shared image is shared with.
type Member struct {
	ProjectID string    `json:"member_id"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Member returns the image's member for a project, if there is one.
func (im Image) Member(projectID string) (Member, bool) {
	for _, m := range im.Members {
		if m.ProjectID == projectID {
			return m, true
		}
	}
	return Member{}, false
}

// Errors of the Store.
var (
	ErrNotFound = errors.New("image not found")
	ErrExists   = errors.New("image exists")
	// ErrTooLarge: the upload passed the size cap.
	ErrTooLarge = errors.New("the image is larger than the size cap")
	// ErrBusy: another upload of the image is in progress.
	ErrBusy = errors.New("an upload of the image is in progress")
	// ErrStatus: the image's status does not allow the operation.
	ErrStatus = errors.New("the image's status does not allow it")
)

// Store keeps images in a directory: <id> is an image's data, <id>.json
// its record, <id>.part an upload in progress.
type Store struct {
	dir string
	cap int64
	now func() time.Time
	mu  sync.Mutex // orders this replica's record writes
}

// NewStore opens (creating it if need be) the directory dir; sizeCap
// bounds an image's data (Glance's image_size_cap).
func NewStore(dir string, sizeCap int64, now func() time.Time) (*Store, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("image store %s: %w", dir, err)
	}
	if now == nil {
		now = time.Now
	}
	return &Store{dir: dir, cap: sizeCap, now: now}, nil
}

func (s *Store) path(id, ext string) string { return filepath.Join(s.dir, id+ext) }

// validID keeps IDs to UUIDs, so a path is never built from anything
// else.
func validID(id string) bool { return uuid.Validate(id) == nil && !strings.ContainsAny(id, "/\\.") }

// Create stores a new image record (status queued); ErrExists if the ID
// is taken. Its times keep their nanoseconds (the API shows seconds), so
// images created in one second still sort by creation.
func (s *Store) Create(im Image) (Image, error) {
	if !validID(im.ID) {
		return Image{}, fmt.Errorf("image id %q: %w", im.ID, ErrNotFound)
	}
	now := s.now().UTC()
	im.Status, im.CreatedAt, im.UpdatedAt = StatusQueued, now, now
	data, err := json.Marshal(im)
	if err != nil {
		return Image{}, fmt.Errorf("encoding image %s: %w", im.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, err := os.OpenFile(s.path(im.ID, ".json"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if errors.Is(err, fs.ErrExist) {
		return Image{}, fmt.Errorf("image %s: %w", im.ID, ErrExists)
	}
	if err != nil {
		return Image{}, fmt.Errorf("creating image %s: %w", im.ID, err)
	}
	_, werr := f.Write(data)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(s.path(im.ID, ".json"))
		return Image{}, fmt.Errorf("writing image %s: %w", im.ID, err)
	}
	return im, nil
}

// Get reads an image's record.
func (s *Store) Get(id string) (Image, error) {
	if !validID(id) {
		return Image{}, fmt.Errorf("image %s: %w", id, ErrNotFound)
	}
	data, err := os.ReadFile(s.path(id, ".json"))
	if errors.Is(err, fs.ErrNotExist) {
		return Image{}, fmt.Errorf("image %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Image{}, fmt.Errorf("reading image %s: %w", id, err)
	}
	var im Image
	if err := json.Unmarshal(data, &im); err != nil {
		return Image{}, fmt.Errorf("decoding image %s: %w", id, err)
	}
	return im, nil
}

// List reads every image's record.
func (s *Store) List() ([]Image, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("listing images: %w", err)
	}
	out := []Image{}
	for _, e := range ents {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !validID(id) {
			continue
		}
		im, err := s.Get(id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, im)
	}
	return out, nil
}

// put replaces an image's record (by rename: readers see the old or the
// new one).
func (s *Store) put(im Image) error {
	data, err := json.Marshal(im)
	if err != nil {
		return fmt.Errorf("encoding image %s: %w", im.ID, err)
	}
	tmp, err := os.CreateTemp(s.dir, "."+im.ID+".json.*")
	if err != nil {
		return fmt.Errorf("writing image %s: %w", im.ID, err)
	}
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing image %s: %w", im.ID, err)
	}
	if err := os.Rename(tmp.Name(), s.path(im.ID, ".json")); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing image %s: %w", im.ID, err)
	}
	return nil
}

// Update applies fn to an image's record and stores it.
func (s *Store) Update(id string, fn func(*Image) error) (Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	im, err := s.Get(id)
	if err != nil {
		return Image{}, err
	}
	if err := fn(&im); err != nil {
		return Image{}, err
	}
	im.ID = id
	im.UpdatedAt = s.now().UTC()
	if err := s.put(im); err != nil {
		return Image{}, err
	}
	return im, nil
}

// Delete removes an image's record, then its data.
func (s *Store) Delete(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.Get(id); err != nil {
		return err
	}
	if err := os.Remove(s.path(id, ".json")); err != nil {
		return fmt.Errorf("deleting image %s: %w", id, err)
	}
	if err := os.Remove(s.path(id, "")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting the data of image %s: %w", id, err)
	}
	return nil
}

// Upload stores r as a queued image's data and makes it active with its
// size and hashes. The image is saving meanwhile; on any failure (r
// failing or cut short, the cap passed) it is queued again and no data
// stays. ErrStatus unless the image is queued, ErrBusy while another
// upload of it runs, ErrTooLarge past the cap.
//
// The upload holds an exclusive lock (flock) on its file from the moment
// the file has its name until the image is active: what Sweep and a
// later Upload read to tell an upload in progress, on this replica or
// another sharing the directory, from one a crash left behind.
func (s *Store) Upload(id string, r io.Reader) (Image, error) {
	im, err := s.Get(id)
	if err != nil {
		return Image{}, err
	}
	if im.Status == StatusSaving {
		// Its upload may have died with its server: then it is queued
		// again and this upload goes on.
		if ok, err := s.reclaim(id); err != nil {
			return im, err
		} else if ok {
			im.Status = StatusQueued
		}
	}
	if im.Status != StatusQueued {
		return im, fmt.Errorf("image %s is %s: %w", id, im.Status, ErrStatus)
	}
	part := s.path(id, ".part")
	f, err := s.createLocked(part)
	if err != nil {
		return im, fmt.Errorf("uploading image %s: %w", id, err)
	}
	fail := func(err error) (Image, error) {
		_ = os.Remove(part)
		_ = f.Close()
		_, _ = s.Update(id, func(im *Image) error {
			if im.Status == StatusSaving {
				im.Status = StatusQueued
			}
			return nil
		})
		return im, err
	}
	if _, err := s.Update(id, func(im *Image) error {
		if im.Status != StatusQueued {
			return fmt.Errorf("image %s is %s: %w", id, im.Status, ErrStatus)
		}
		im.Status = StatusSaving
		return nil
	}); err != nil {
		_ = os.Remove(part)
		_ = f.Close()
		return im, err
	}
	sum5, sum512, head := md5.New(), sha512.New(), &headWriter{}
	n, err := io.Copy(io.MultiWriter(f, sum5, sum512, head), io.LimitReader(r, s.cap+1))
	if err != nil {
		return fail(fmt.Errorf("uploading image %s: %w", id, err))
	}
	if n > s.cap {
		return fail(fmt.Errorf("image %s: %w (%d bytes)", id, ErrTooLarge, s.cap))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("uploading image %s: %w", id, err))
	}
	// Renamed, the file keeps its lock until the record says active.
	if err := os.Rename(part, s.path(id, "")); err != nil {
		return fail(fmt.Errorf("uploading image %s: %w", id, err))
	}
	out, err := s.Update(id, func(im *Image) error {
		if im.Status != StatusSaving {
			return fmt.Errorf("image %s became %s during the upload: %w", id, im.Status, ErrStatus)
		}
		im.Status, im.Size, im.VirtualSize = StatusActive, &n, virtualSize(im.DiskFormat, head.b, n)
		im.Checksum, im.HashAlgo, im.HashValue = hex.EncodeToString(sum5.Sum(nil)), "sha512", hex.EncodeToString(sum512.Sum(nil))
		return nil
	})
	if err != nil {
		_ = os.Remove(s.path(id, ""))
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return out, fmt.Errorf("uploading image %s: %w", id, err)
	}
	return out, nil
}

// createLocked creates path exclusively with an flock held on it: the
// file is made and locked under a temporary name, then linked to path
// (which fails if path exists), so no one ever sees path unlocked while
// its upload lives. A path that exists but that no one holds was left by
// a crash: it is removed and the creation tried again. ErrBusy while
// another upload holds it.
func (s *Store) createLocked(path string) (*os.File, error) {
	tmp, err := os.CreateTemp(s.dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	if err := syscall.Flock(int(tmp.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = tmp.Close()
		return nil, fmt.Errorf("locking %s: %w", tmp.Name(), err)
	}
	for try := 0; ; try++ {
		err := os.Link(tmp.Name(), path)
		if err == nil {
			return tmp, nil
		}
		if !errors.Is(err, fs.ErrExist) || try > 0 {
			_ = tmp.Close()
			if errors.Is(err, fs.ErrExist) {
				err = ErrBusy
			}
			return nil, err
		}
		busy, berr := held(path)
		if berr != nil || busy {
			_ = tmp.Close()
			return nil, errors.Join(ErrBusy, berr)
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			_ = tmp.Close()
			return nil, err
		}
	}
}

// held reports whether someone holds path's lock (an upload in progress);
// false if there is no such file.
func held(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("locking %s: %w", path, err)
	}
	return false, nil
}

// errUnchanged leaves a record as it was in Update.
var errUnchanged = errors.New("unchanged")

// reclaim queues again an image left saving by an upload that no longer
// runs (its server crashed): its partial or unrecorded data is removed,
// as nothing was stored. It reports whether it did.
func (s *Store) reclaim(id string) (bool, error) {
	for _, ext := range []string{".part", ""} {
		if busy, err := held(s.path(id, ext)); err != nil || busy {
			return false, err
		}
	}
	for _, ext := range []string{".part", ""} {
		if err := os.Remove(s.path(id, ext)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("removing the partial data of image %s: %w", id, err)
		}
	}
	_, err := s.Update(id, func(im *Image) error {
		if im.Status != StatusSaving {
			return errUnchanged
		}
		im.Status = StatusQueued
		return nil
	})
	if errors.Is(err, errUnchanged) {
		return false, nil
	}
	return err == nil, err
}

// staleAfter is how old a temporary file (a record being replaced, an
// upload's file before it has its name) must be before Sweep takes it for
// a crash's leftover.
const staleAfter = time.Minute

// Swept is what Sweep cleared.
type Swept struct {
	// Requeued are the images that were saving with no upload running.
	Requeued []string
	// Removed are the files no upload or record write held.
	Removed []string
}

// Sweep clears what uploads and record writes a crash interrupted left in
// the directory (a server runs it at start): images saving with no upload
// running go back to queued, their partial data removed; upload files and
// temporary records no one holds are removed. Uploads in progress on
// other replicas sharing the directory are left alone (they hold their
// files' locks).
func (s *Store) Sweep() (Swept, error) {
	var out Swept
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return out, fmt.Errorf("sweeping the image store: %w", err)
	}
	now := s.now()
	for _, e := range ents {
		name := e.Name()
		if id, ok := strings.CutSuffix(name, ".json"); ok && validID(id) {
			im, err := s.Get(id)
			if err != nil || im.Status != StatusSaving {
				continue
			}
			if ok, err := s.reclaim(id); err != nil {
				return out, err
			} else if ok {
				out.Requeued = append(out.Requeued, id)
			}
			continue
		}
		stale := strings.HasSuffix(name, ".part")
		if strings.HasPrefix(name, ".") {
			info, err := e.Info()
			stale = err == nil && now.Sub(info.ModTime()) > staleAfter
		}
		if !stale {
			continue
		}
		path := filepath.Join(s.dir, name)
		if busy, err := held(path); err != nil || busy {
			continue
		}
		err := os.Remove(path)
		if errors.Is(err, fs.ErrNotExist) {
			continue // reclaimed with its image above
		}
		if err != nil {
			return out, fmt.Errorf("sweeping the image store: %w", err)
		}
		out.Removed = append(out.Removed, name)
	}
	return out, nil
}

// Open opens an active image's data.
func (s *Store) Open(id string) (*os.File, error) {
	if !validID(id) {
		return nil, fmt.Errorf("image %s: %w", id, ErrNotFound)
	}
	f, err := os.Open(s.path(id, ""))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("the data of image %s: %w", id, ErrNotFound)
	}
	return f, err
}

// sortedTags normalises tags: sorted, no duplicates.
func sortedTags(tags []string) []string {
	out := slices.Clone(tags)
	slices.Sort(out)
	return slices.Compact(out)
}

// headWriter keeps the first bytes written to it: a disk image's header.
type headWriter struct{ b []byte }

// qcow2HeaderLen is as much of a qcow2 header as virtualSize reads: the
// magic, the version, the backing file's offset and size, the cluster
// bits and the disk's size.
const qcow2HeaderLen = 32

func (h *headWriter) Write(p []byte) (int, error) {
	if n := qcow2HeaderLen - len(h.b); n > 0 {
		h.b = append(h.b, p[:min(n, len(p))]...)
	}
	return len(p), nil
}

// virtualSize is the size of the disk an image's data holds, from its
// format: raw and iso data is the disk, a qcow2 header names the disk's
// size (big-endian, at byte 24, after the magic "QFI\xfb"). Other
// formats, and qcow2 data without a qcow2 header, give nil.
func virtualSize(format string, head []byte, size int64) *int64 {
	switch format {
	case "raw", "iso":
		return &size
	case "qcow2":
		if len(head) < qcow2HeaderLen || string(head[:4]) != "QFI\xfb" {
			return nil
		}
		v := int64(binary.BigEndian.Uint64(head[24:32]))
		if v < 0 {
			return nil
		}
		return &v
	}
	return nil
}
