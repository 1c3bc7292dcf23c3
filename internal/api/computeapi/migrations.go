package computeapi

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"keel/internal/records"
	"keel/internal/store"
)

func (a *migrationsAPI) migrationView(r *http.Request, m records.Migration) map[string]any {
	v := map[string]any{
		"id": m.ID, "instance_uuid": m.InstanceUUID, "status": m.Status,
		"source_compute": m.SourceHost, "source_node": m.SourceHost,
		"dest_compute": nilIfEmpty(m.DestHost), "dest_node": nilIfEmpty(m.DestHost), "dest_host": "",
		"old_instance_type_id": nil, "new_instance_type_id": nil,
		"created_at": migrationTime(m.CreatedAt), "updated_at": migrationTime(m.UpdatedAt),
	}
	ver := version(r)
	if ver.AtLeast(23) {
		v["migration_type"] = cmpOr(m.Type, records.MigrationTypeLive)
		if !records.MigrationTerminal(m.Status) {
			v["links"] = a.link("servers/"+m.InstanceUUID+"/migrations", strconv.FormatInt(m.ID, 10))
		}
	}
	if ver.AtLeast(59) {
		v["uuid"] = m.UUID
	}
	if ver.AtLeast(80) {
		v["user_id"], v["project_id"] = a.migrationOwner(r, m)
	}
	return v
}

// migrationOwner is who started a migration (2.80's user_id and
// project_id): the live-migration action that names it.
func (a *migrationsAPI) migrationOwner(r *http.Request, m records.Migration) (user, project any) {
	acts, err := a.store.ListInstanceActions(r.Context(), m.InstanceUUID)
	if err != nil {
		a.log.Warn("reading the actions of a migrated instance", "instance", m.InstanceUUID, "err", err)
	}
	for _, act := range acts {
		if act.MigrationID == m.ID {
			return act.UserID, act.ProjectID
		}
	}
	return nil, nil
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// listMigrations is GET /os-migrations (admin), newest first, filtered by
// host, status, instance_uuid and migration_type as Nova does.
func (a *migrationsAPI) listMigrations(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	mt := q.Get("migration_type")
	// 2.59: paging (limit, marker: a migration's uuid) and changes-since;
	// 2.66: changes-before.
	paged := version(r).AtLeast(59)
	limit := -1
	var since, before time.Time
	if paged {
		if q.Has("limit") {
			n, err := strconv.Atoi(q.Get("limit"))
			if err != nil || n < 0 {
				return badRequest("Invalid input for query parameters limit. Value: " + q.Get("limit") + ". not a non-negative integer")
			}
			limit = min(n, 1000)
		}
		var err error
		if since, before, err = changesWindow(r, 59, 66); err != nil {
			return err
		}
	}
	ms, err := a.store.ListMigrations(r.Context(), store.MigrationFilter{
		Host: q.Get("host"), Status: records.MigrationStatus(q.Get("status")), InstanceUUID: q.Get("instance_uuid"),
	})
	if err != nil {
		return err
	}
	slices.Reverse(ms) // newest first
	if m := q.Get("marker"); paged && m != "" {
		i := slices.IndexFunc(ms, func(x records.Migration) bool { return x.UUID == m })
		if i < 0 {
			return badRequest("Marker " + m + " could not be found.")
		}
		ms = ms[i+1:]
	}
	var sel []records.Migration
	for _, m := range ms {
		if (!since.IsZero() && m.UpdatedAt.Before(since)) || (!before.IsZero() && m.UpdatedAt.After(before)) {
			continue
		}
		if mt != "" && cmpOr(m.Type, records.MigrationTypeLive) != mt {
			continue
		}
		sel = append(sel, m)
	}
	body := map[string]any{}
	if limit >= 0 && len(sel) > limit {
		sel = sel[:limit]
		if limit > 0 {
			body["migrations_links"] = a.nextLink(r, "os-migrations", sel[limit-1].UUID)
		}
	}
	out := make([]any, 0, len(sel))
	for _, m := range sel {
		out = append(out, a.migrationView(r, m))
	}
	body["migrations"] = out
	writeJSON(w, http.StatusOK, body)
	return nil
}

func (a *migrationsAPI) serverMigrationView(r *http.Request, m records.Migration) map[string]any {
	v := map[string]any{
		"id": m.ID, "server_uuid": m.InstanceUUID, "status": m.Status,
		"source_compute": m.SourceHost, "source_node": m.SourceHost,
		"dest_compute": m.DestHost, "dest_node": m.DestHost, "dest_host": "",
		"memory_total_bytes": m.MemoryTotalBytes, "memory_processed_bytes": m.MemoryProcessedBytes,
		"memory_remaining_bytes": m.MemoryRemainingBytes,
		"disk_total_bytes":       0, "disk_processed_bytes": 0, "disk_remaining_bytes": 0,
		"created_at": migrationTime(m.CreatedAt), "updated_at": migrationTime(m.UpdatedAt),
	}
	if version(r).AtLeast(59) {
		v["uuid"] = m.UUID
	}
	if version(r).AtLeast(80) {
		v["user_id"], v["project_id"] = a.migrationOwner(r, m)
	}
	return v
}

// migrationTime renders a migration's timestamps as Nova does
// ("2016-01-29T13:42:02.000000", no zone), which clients parse strictly.
func migrationTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format("2006-01-02T15:04:05.000000")
}

// serverMigration loads migration mid of server id, or a 404 in Nova's
// words.
func (a *migrationsAPI) serverMigration(r *http.Request) (records.Migration, error) {
	if !version(r).AtLeast(23) {
		return records.Migration{}, notFound("The resource could not be found.")
	}
	mid, err := strconv.ParseInt(r.PathValue("mid"), 10, 64)
	if err != nil {
		return records.Migration{}, badRequest("migration id must be an integer")
	}
	m, err := a.store.GetMigration(r.Context(), mid)
	if isNotFound(err) || (err == nil && m.InstanceUUID != r.PathValue("id")) {
		return records.Migration{}, notFoundf("Migration %d for instance %s could not be found.", mid, r.PathValue("id"))
	}
	return m, err
}

func (a *migrationsAPI) listServerMigrations(w http.ResponseWriter, r *http.Request) error {
	if !version(r).AtLeast(23) {
		return notFound("The resource could not be found.")
	}
	if _, err := a.instance(r, r.PathValue("id")); err != nil {
		return err
	}
	ms, err := a.store.ListMigrations(r.Context(), store.MigrationFilter{InstanceUUID: r.PathValue("id"), ActiveOnly: true})
	if err != nil {
		return err
	}
	out := make([]any, 0, len(ms))
	for _, m := range ms {
		if cmpOr(m.Type, records.MigrationTypeLive) == records.MigrationTypeLive { // in-progress live migrations only, as Nova
			out = append(out, a.serverMigrationView(r, m))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"migrations": out})
	return nil
}

func (a *migrationsAPI) showServerMigration(w http.ResponseWriter, r *http.Request) error {
	m, err := a.serverMigration(r)
	if err != nil {
		return err
	}
	if records.MigrationTerminal(m.Status) || cmpOr(m.Type, records.MigrationTypeLive) != records.MigrationTypeLive {
		return notFoundf("In-progress live migration %d is not found for server %s.", m.ID, m.InstanceUUID)
	}
	writeJSON(w, http.StatusOK, map[string]any{"migration": a.serverMigrationView(r, m)})
	return nil
}

func (a *migrationsAPI) abortServerMigration(w http.ResponseWriter, r *http.Request) error {
	if !version(r).AtLeast(24) {
		return notFound("The resource could not be found.")
	}
	m, err := a.serverMigration(r)
	if err != nil {
		return err
	}
	if err := a.conductor.Abort(r.Context(), m.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}

func (a *migrationsAPI) serverMigrationAction(w http.ResponseWriter, r *http.Request) error {
	var body map[string]jsonRaw
	if err := decode(r, &body); err != nil {
		return err
	}
	if err := knownAction(body, map[string]bool{"force_complete": true}); err != nil {
		return err
	}
	if !version(r).AtLeast(22) {
		return badRequest("force_complete needs microversion 2.22 or later")
	}
	m, err := a.serverMigration(r)
	if err != nil {
		return err
	}
	if err := a.conductor.ForceComplete(r.Context(), m.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusAccepted)
	return nil
}
