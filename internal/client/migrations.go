package client

import (
	"context"
	"fmt"
	"net/url"
	"sort"
	"time"

	"github.com/gophercloud/gophercloud/v2/openstack/compute/v2/servers"
)

// Migration statuses (Nova's, in order for a live migration that succeeds).
const (
	MigrationAccepted  = "accepted"
	MigrationQueued    = "queued"
	MigrationPreparing = "preparing"
	MigrationRunning   = "running"
	MigrationCompleted = "completed"
	MigrationFailed    = "failed"
	MigrationError     = "error"
	MigrationCancelled = "cancelled"
)

// Terminal reports whether a migration status is final.
func Terminal(status string) bool {
	switch status {
	case MigrationCompleted, MigrationFailed, MigrationError, MigrationCancelled, "done", "aborted":
		return true
	}
	return false
}

// Succeeded reports whether a final status means the instance moved.
func Succeeded(status string) bool { return status == MigrationCompleted || status == "done" }

// Migration is a migration record: from os-migrations, or (with the
// memory counters) from a server's in-progress migrations.
type Migration struct {
	ID           int64     `json:"id"`
	UUID         string    `json:"uuid,omitempty"`
	InstanceUUID string    `json:"instance_uuid"`
	Source       string    `json:"source_compute"`
	Dest         string    `json:"dest_compute"`
	Status       string    `json:"status"`
	Type         string    `json:"migration_type,omitempty"`
	Created      time.Time `json:"created_at"`
	Updated      time.Time `json:"updated_at"`
	// Memory counters: only while in progress.
	MemoryTotalBytes     int64 `json:"memory_total_bytes,omitempty"`
	MemoryProcessedBytes int64 `json:"memory_processed_bytes,omitempty"`
	MemoryRemainingBytes int64 `json:"memory_remaining_bytes,omitempty"`
}

// MemoryPercent is the share of memory copied so far, 0–100 (0 when
// unknown).
func (m Migration) MemoryPercent() int {
	if m.MemoryTotalBytes <= 0 {
		return 0
	}
	p := m.MemoryProcessedBytes * 100 / m.MemoryTotalBytes
	return int(min(max(p, 0), 100))
}

// rawMigration is the wire shape of both listings. Timestamps are parsed
// leniently: Nova writes "2016-01-29T13:42:02.000000", keel "…02Z".
type rawMigration struct {
	ID                   int64   `json:"id"`
	UUID                 string  `json:"uuid"`
	InstanceUUID         string  `json:"instance_uuid"`
	ServerUUID           string  `json:"server_uuid"`
	SourceCompute        *string `json:"source_compute"`
	DestCompute          *string `json:"dest_compute"`
	Status               string  `json:"status"`
	MigrationType        string  `json:"migration_type"`
	CreatedAt            *string `json:"created_at"`
	UpdatedAt            *string `json:"updated_at"`
	MemoryTotalBytes     int64   `json:"memory_total_bytes"`
	MemoryProcessedBytes int64   `json:"memory_processed_bytes"`
	MemoryRemainingBytes int64   `json:"memory_remaining_bytes"`
}

func (r rawMigration) migration() Migration {
	m := Migration{
		ID: r.ID, UUID: r.UUID, InstanceUUID: r.InstanceUUID, Source: deref(r.SourceCompute), Dest: deref(r.DestCompute),
		Status: r.Status, Type: r.MigrationType, Created: parseTime(deref(r.CreatedAt)), Updated: parseTime(deref(r.UpdatedAt)),
		MemoryTotalBytes: r.MemoryTotalBytes, MemoryProcessedBytes: r.MemoryProcessedBytes, MemoryRemainingBytes: r.MemoryRemainingBytes,
	}
	if m.InstanceUUID == "" {
		m.InstanceUUID = r.ServerUUID
	}
	return m
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func parseTime(s string) time.Time {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05.999999", "2006-01-02 15:04:05"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// MigrationFilter narrows os-migrations; empty fields do not filter.
type MigrationFilter struct {
	Host         string // source or destination
	Status       string
	InstanceUUID string
	Type         string // live-migration, migration, resize, evacuation
}

// Migrations lists migrations (admin), newest first.
func (c *Client) Migrations(ctx context.Context, f MigrationFilter) ([]Migration, error) {
	q := url.Values{}
	for k, v := range map[string]string{"host": f.Host, "status": f.Status, "instance_uuid": f.InstanceUUID, "migration_type": f.Type} {
		if v != "" {
			q.Set(k, v)
		}
	}
	u := c.compute.ServiceURL("os-migrations")
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body struct {
		Migrations []rawMigration `json:"migrations"`
	}
	if _, err := c.compute.Get(ctx, u, &body, nil); err != nil {
		return nil, fmt.Errorf("listing migrations: %w", describe(err))
	}
	return newestFirst(body.Migrations), nil
}

// ServerMigrations lists a server's in-progress migrations with their
// memory counters (admin, microversion 2.23 or later), newest first.
func (c *Client) ServerMigrations(ctx context.Context, serverID string) ([]Migration, error) {
	var body struct {
		Migrations []rawMigration `json:"migrations"`
	}
	if _, err := c.compute.Get(ctx, c.compute.ServiceURL("servers", serverID, "migrations"), &body, nil); err != nil {
		return nil, fmt.Errorf("listing migrations of server %s: %w", serverID, describe(err))
	}
	ms := newestFirst(body.Migrations)
	for i := range ms {
		ms[i].InstanceUUID = serverID
		if ms[i].Type == "" {
			ms[i].Type = "live-migration"
		}
	}
	return ms, nil
}

func newestFirst(raw []rawMigration) []Migration {
	out := make([]Migration, len(raw))
	for i, r := range raw {
		out[i] = r.migration()
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out
}

// liveMigrateOpts is os-migrateLive at 2.25 and later: block_migration
// "auto" (gophercloud's LiveMigrateOpts only knows the boolean of 2.1).
type liveMigrateOpts struct{ host string }

func (o liveMigrateOpts) ToLiveMigrateMap() (map[string]any, error) {
	var host any
	if o.host != "" {
		host = o.host
	}
	return map[string]any{"os-migrateLive": map[string]any{"host": host, "block_migration": "auto"}}, nil
}

// LiveMigrate starts a live migration of a server (by id), to host or to
// a host the scheduler chooses when host is empty. The returned watch
// follows the migration this call started.
func (c *Client) LiveMigrate(ctx context.Context, serverID, host string) (*MigrationWatch, error) {
	// Migrations started from now on have larger ids than every one the
	// server already has.
	before, err := c.Migrations(ctx, MigrationFilter{InstanceUUID: serverID})
	if err != nil {
		return nil, err
	}
	var after int64
	for _, m := range before {
		after = max(after, m.ID)
	}
	if err := servers.LiveMigrate(ctx, c.compute, serverID, liveMigrateOpts{host}).ExtractErr(); err != nil {
		return nil, fmt.Errorf("live-migrating server %s: %w", serverID, describe(err))
	}
	return &MigrationWatch{c: c, ServerID: serverID, after: after}, nil
}

// MigrationWatch follows one live migration of a server.
type MigrationWatch struct {
	c        *Client
	ServerID string
	after    int64 // the migration has a larger id
	id       int64 // once found
}

// Poll reads the migration's current state: from the server's in-progress
// migrations while it runs (with the memory counters), from os-migrations
// once it ended. found is false until the record is visible.
func (w *MigrationWatch) Poll(ctx context.Context) (m Migration, found bool, err error) {
	live, err := w.c.ServerMigrations(ctx, w.ServerID)
	if err != nil && !isNotFound(err) {
		return Migration{}, false, err
	}
	for _, m := range live {
		if w.mine(m) {
			return m, true, nil
		}
	}
	all, err := w.c.Migrations(ctx, MigrationFilter{InstanceUUID: w.ServerID})
	if err != nil {
		return Migration{}, false, err
	}
	for _, m := range all {
		if w.mine(m) {
			return m, true, nil
		}
	}
	return Migration{}, false, nil
}

func (w *MigrationWatch) mine(m Migration) bool {
	if w.id != 0 {
		return m.ID == w.id
	}
	if m.ID > w.after {
		w.id = m.ID
		return true
	}
	return false
}

// Wait polls every interval until the migration ends, calling onChange
// (if not nil) with the first state seen and whenever the status or the
// share of memory copied changes. It returns the final state; an error
// only when polling fails or ctx ends (then with the last state seen).
func (w *MigrationWatch) Wait(ctx context.Context, interval time.Duration, onChange func(Migration)) (Migration, error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var last Migration
	seen := false
	for {
		m, found, err := w.Poll(ctx)
		if err != nil && ctx.Err() == nil {
			return last, err
		}
		if found {
			if !seen || m.Status != last.Status || m.MemoryPercent() != last.MemoryPercent() {
				if onChange != nil {
					onChange(m)
				}
			}
			last, seen = m, true
			if Terminal(m.Status) {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-t.C:
		}
	}
}

// FailureReason returns what the API tells about why a server's last
// operation failed (its fault), or "".
func (c *Client) FailureReason(ctx context.Context, serverID string) string {
	s, err := c.GetServer(ctx, serverID)
	if err != nil {
		return ""
	}
	return s.Fault
}
