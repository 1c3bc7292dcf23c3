package image

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// RotateBackups keeps the newest keep backups of instance instanceUUID
// of type backupType (image_type backup, Nova's properties
// instance_uuid and backup_type) and deletes the older ones, as Nova's
// backup rotation; with keep 0 every one goes. It returns the IDs it
// deleted. Images created in one second sort by their nanoseconds, then
// by ID.
func (s *Store) RotateBackups(instanceUUID, backupType string, keep int) ([]string, error) {
	all, err := s.List()
	if err != nil {
		return nil, err
	}
	var backups []Image
	for _, im := range all {
		if im.Properties["image_type"] == "backup" && im.Properties["instance_uuid"] == instanceUUID && im.Properties["backup_type"] == backupType {
			backups = append(backups, im)
		}
	}
	slices.SortStableFunc(backups, func(x, y Image) int { // newest first
		if n := y.CreatedAt.Compare(x.CreatedAt); n != 0 {
			return n
		}
		return strings.Compare(y.ID, x.ID)
	})
	var deleted []string
	for _, im := range backups[min(keep, len(backups)):] {
		if err := s.Delete(im.ID); err != nil && !errors.Is(err, ErrNotFound) {
			return deleted, fmt.Errorf("rotating the %s backups of %s: %w", backupType, instanceUUID, err)
		}
		deleted = append(deleted, im.ID)
	}
	return deleted, nil
}
