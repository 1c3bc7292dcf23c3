package computeapi

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"keel/internal/placement"
	"keel/internal/records"
)

// os-aggregates: host aggregates (admin only). A host joins the placement
// aggregate of the same UUID as it joins the compute aggregate, as Nova
// mirrors them; an aggregate's availability_zone metadata is its hosts'
// zone for os-availability-zone and the scheduler's
// AvailabilityZoneFilter.

type routeFunc func(pattern string, admin bool, h func(w http.ResponseWriter, r *http.Request) error)

func (a *aggregatesAPI) aggregateRoutes(route routeFunc) {
	route("GET /compute/v2.1/os-aggregates", true, a.listAggregates)
	route("POST /compute/v2.1/os-aggregates", true, a.createAggregate)
	route("GET /compute/v2.1/os-aggregates/{id}", true, a.showAggregate)
	route("PUT /compute/v2.1/os-aggregates/{id}", true, a.updateAggregate)
	route("DELETE /compute/v2.1/os-aggregates/{id}", true, a.deleteAggregate)
	route("POST /compute/v2.1/os-aggregates/{id}/action", true, a.aggregateAction)
}

// aggregateView is Nova's aggregate; create's answer leaves out hosts and
// metadata, as Nova's does.
func aggregateView(r *http.Request, ag records.Aggregate, full bool) map[string]any {
	var zone any
	if z := ag.Zone(); z != "" {
		zone = z
	}
	v := map[string]any{
		"id": ag.ID, "name": ag.Name, "availability_zone": zone,
		"created_at": migrationTime(ag.CreatedAt), "updated_at": migrationTime(ag.UpdatedAt),
		"deleted": false, "deleted_at": nil,
	}
	if full {
		hosts := ag.Hosts
		if hosts == nil {
			hosts = []string{}
		}
		md := ag.Metadata
		if md == nil {
			md = map[string]string{}
		}
		v["hosts"], v["metadata"] = hosts, md
	}
	if version(r).AtLeast(41) {
		v["uuid"] = ag.UUID
	}
	return v
}

func (a *aggregatesAPI) aggregate(r *http.Request) (records.Aggregate, error) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		return records.Aggregate{}, badRequest("Invalid aggregate id " + r.PathValue("id"))
	}
	ag, err := a.store.GetAggregate(r.Context(), id)
	if isNotFound(err) {
		return records.Aggregate{}, notFoundf("Aggregate %d could not be found.", id)
	}
	return ag, err
}

func (a *aggregatesAPI) listAggregates(w http.ResponseWriter, r *http.Request) error {
	aggs, err := a.store.ListAggregates(r.Context())
	if err != nil {
		return err
	}
	out := make([]any, 0, len(aggs))
	for _, ag := range aggs {
		out = append(out, aggregateView(r, ag, true))
	}
	writeJSON(w, http.StatusOK, map[string]any{"aggregates": out})
	return nil
}

func (a *aggregatesAPI) showAggregate(w http.ResponseWriter, r *http.Request) error {
	ag, err := a.aggregate(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"aggregate": aggregateView(r, ag, true)})
	return nil
}

// aggregateBody is create's and update's body; unknown fields are refused
// (Nova's schema has additionalProperties false).
type aggregateBody struct {
	Aggregate *struct {
		Name *string `json:"name"`
		Zone *string `json:"availability_zone"`
	} `json:"aggregate"`
}

func checkAggregateName(field string, s *string, required bool) error {
	if s == nil {
		if required {
			return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: None. '%s' is a required property", field, field))
		}
		return nil
	}
	if t := strings.TrimSpace(*s); t == "" || len(*s) > 255 || t != *s {
		return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. It must be 1 to 255 characters without leading or trailing whitespace", field, *s))
	}
	if field == "availability_zone" && strings.Contains(*s, ":") {
		return badRequest(fmt.Sprintf("Invalid input for field/attribute %s. Value: %s. An availability zone name cannot contain ':'", field, *s))
	}
	return checkPrintable(field, *s)
}

func (a *aggregatesAPI) createAggregate(w http.ResponseWriter, r *http.Request) error {
	var body aggregateBody
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	b := body.Aggregate
	if b == nil {
		return badRequest("Invalid input for field/attribute aggregate. Value: None. 'aggregate' is a required property")
	}
	if err := checkAggregateName("name", b.Name, true); err != nil {
		return err
	}
	if err := checkAggregateName("availability_zone", b.Zone, false); err != nil {
		return err
	}
	now := a.clock.Now()
	ag := records.Aggregate{UUID: uuid.NewString(), Name: *b.Name, Hosts: []string{}, Metadata: map[string]string{}, CreatedAt: now}
	if b.Zone != nil {
		ag.Metadata[records.AggregateZoneKey] = *b.Zone
	}
	ag, err := a.store.CreateAggregate(r.Context(), ag)
	if err != nil {
		if statusOf(err) == http.StatusConflict {
			return conflict(fmt.Sprintf("Aggregate %s already exists.", *b.Name))
		}
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"aggregate": aggregateView(r, ag, false)})
	return nil
}

func (a *aggregatesAPI) updateAggregate(w http.ResponseWriter, r *http.Request) error {
	ag, err := a.aggregate(r)
	if err != nil {
		return err
	}
	var body aggregateBody
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	b := body.Aggregate
	if b == nil || (b.Name == nil && b.Zone == nil) {
		return badRequest("Invalid input for field/attribute aggregate: give name or availability_zone")
	}
	if err := checkAggregateName("name", b.Name, false); err != nil {
		return err
	}
	if err := checkAggregateName("availability_zone", b.Zone, false); err != nil {
		return err
	}
	if b.Zone != nil {
		if err := a.checkZoneChange(r.Context(), ag, *b.Zone); err != nil {
			return badRequest(fmt.Sprintf("Cannot update aggregate %d. Reason: %v.", ag.ID, err))
		}
	}
	ag, err = a.store.UpdateAggregate(r.Context(), ag.ID, func(x *records.Aggregate) error {
		if b.Name != nil {
			x.Name = *b.Name
		}
		if b.Zone != nil {
			setMeta(x, records.AggregateZoneKey, *b.Zone)
		}
		x.UpdatedAt = a.clock.Now()
		return nil
	})
	if err != nil {
		if statusOf(err) == http.StatusConflict {
			return conflict(fmt.Sprintf("Aggregate %s already exists.", *b.Name))
		}
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"aggregate": aggregateView(r, ag, true)})
	return nil
}

func setMeta(ag *records.Aggregate, k, v string) {
	if ag.Metadata == nil {
		ag.Metadata = map[string]string{}
	}
	ag.Metadata[k] = v
}

func (a *aggregatesAPI) deleteAggregate(w http.ResponseWriter, r *http.Request) error {
	ag, err := a.aggregate(r)
	if err != nil {
		return err
	}
	if len(ag.Hosts) > 0 {
		return badRequest(fmt.Sprintf("Cannot remove aggregate %d. Reason: Host aggregate is not empty.", ag.ID))
	}
	if err := a.store.DeleteAggregate(r.Context(), ag.ID); err != nil {
		return err
	}
	w.WriteHeader(http.StatusOK)
	return nil
}

// aggregateAction is POST /os-aggregates/{id}/action: add_host,
// remove_host or set_metadata.
func (a *aggregatesAPI) aggregateAction(w http.ResponseWriter, r *http.Request) error {
	ag, err := a.aggregate(r)
	if err != nil {
		return err
	}
	var body struct {
		AddHost *struct {
			Host *string `json:"host"`
		} `json:"add_host"`
		RemoveHost *struct {
			Host *string `json:"host"`
		} `json:"remove_host"`
		SetMetadata *struct {
			Metadata map[string]*string `json:"metadata"`
		} `json:"set_metadata"`
	}
	if err := decodeStrict(r, &body); err != nil {
		return err
	}
	if n := btoi(body.AddHost != nil) + btoi(body.RemoveHost != nil) + btoi(body.SetMetadata != nil); n > 1 {
		return badRequest("Malformed request body: too many body keys (an action body names exactly one action)")
	}
	ctx := r.Context()
	switch {
	case body.AddHost != nil && body.AddHost.Host != nil:
		ag, err = a.addAggregateHost(ctx, ag, *body.AddHost.Host)
	case body.RemoveHost != nil && body.RemoveHost.Host != nil:
		ag, err = a.removeAggregateHost(ctx, ag, *body.RemoveHost.Host)
	case body.SetMetadata != nil && body.SetMetadata.Metadata != nil:
		ag, err = a.setAggregateMetadata(ctx, ag, body.SetMetadata.Metadata)
	default:
		return badRequest("Invalid input for the aggregate action: give add_host {host}, remove_host {host} or set_metadata {metadata}")
	}
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"aggregate": aggregateView(r, ag, true)})
	return nil
}

func (a *aggregatesAPI) addAggregateHost(ctx context.Context, ag records.Aggregate, host string) (records.Aggregate, error) {
	if _, err := a.store.GetService(ctx, host); err != nil {
		if isNotFound(err) {
			return ag, notFoundf("Compute host %s could not be found.", host)
		}
		return ag, err
	}
	if z := ag.Zone(); z != "" {
		zones, err := a.hostAggregateZones(ctx, host, ag.ID)
		if err != nil {
			return ag, err
		}
		if len(zones) > 0 && !slices.Equal(zones, []string{z}) {
			return ag, conflict(fmt.Sprintf("Cannot add host to aggregate %d. Reason: One or more hosts already in availability zone(s) %v.", ag.ID, zones))
		}
	}
	ag, err := a.store.UpdateAggregate(ctx, ag.ID, func(x *records.Aggregate) error {
		if slices.Contains(x.Hosts, host) {
			return conflict(fmt.Sprintf("Aggregate %d already has host %s.", x.ID, host))
		}
		x.Hosts = append(x.Hosts, host)
		x.UpdatedAt = a.clock.Now()
		return nil
	})
	if err != nil {
		return ag, err
	}
	a.mirror(ctx, host, ag.UUID, true)
	return ag, nil
}

func (a *aggregatesAPI) removeAggregateHost(ctx context.Context, ag records.Aggregate, host string) (records.Aggregate, error) {
	ag, err := a.store.UpdateAggregate(ctx, ag.ID, func(x *records.Aggregate) error {
		if !slices.Contains(x.Hosts, host) {
			return notFoundf("Cannot remove host %s in aggregate %d", host, x.ID)
		}
		x.Hosts = slices.DeleteFunc(x.Hosts, func(h string) bool { return h == host })
		x.UpdatedAt = a.clock.Now()
		return nil
	})
	if err != nil {
		return ag, err
	}
	a.mirror(ctx, host, ag.UUID, false)
	return ag, nil
}

func (a *aggregatesAPI) setAggregateMetadata(ctx context.Context, ag records.Aggregate, md map[string]*string) (records.Aggregate, error) {
	for k, v := range md {
		if k == "" || len(k) > 255 || (v != nil && len(*v) > 255) {
			return ag, badRequest(fmt.Sprintf("Invalid input for field/attribute metadata: key %q or its value is empty or longer than 255 characters", k))
		}
	}
	if v, ok := md[records.AggregateZoneKey]; ok && v != nil {
		if err := checkAggregateName("availability_zone", v, false); err != nil {
			return ag, err
		}
		if err := a.checkZoneChange(ctx, ag, *v); err != nil {
			return ag, badRequest(fmt.Sprintf("Cannot update metadata of aggregate %d. Reason: %v.", ag.ID, err))
		}
	}
	return a.store.UpdateAggregate(ctx, ag.ID, func(x *records.Aggregate) error {
		for k, v := range md {
			if v == nil {
				delete(x.Metadata, k)
			} else {
				setMeta(x, k, *v)
			}
		}
		x.UpdatedAt = a.clock.Now()
		return nil
	})
}

// checkZoneChange refuses to put an aggregate's hosts in zone when one of
// them is already in another zone through another aggregate (a host is in
// one zone only).
func (a *aggregatesAPI) checkZoneChange(ctx context.Context, ag records.Aggregate, zone string) error {
	for _, h := range ag.Hosts {
		zones, err := a.hostAggregateZones(ctx, h, ag.ID)
		if err != nil {
			return err
		}
		if len(zones) > 0 && !slices.Equal(zones, []string{zone}) {
			return fmt.Errorf("host %s is already in availability zone(s) %v", h, zones)
		}
	}
	return nil
}

// hostAggregateZones returns the zones a host's aggregates other than
// except put it in, sorted.
func (a *aggregatesAPI) hostAggregateZones(ctx context.Context, host string, except int64) ([]string, error) {
	aggs, err := a.store.ListAggregates(ctx)
	if err != nil {
		return nil, err
	}
	var zones []string
	for _, o := range aggs {
		if o.ID != except && o.Zone() != "" && slices.Contains(o.Hosts, host) && !slices.Contains(zones, o.Zone()) {
			zones = append(zones, o.Zone())
		}
	}
	slices.Sort(zones)
	return zones, nil
}

// hostZones maps each host in an aggregate with availability_zone metadata
// to that zone; hosts not listed are in their service's zone.
func (a *base) hostZones(ctx context.Context) (map[string]string, error) {
	aggs, err := a.store.ListAggregates(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, ag := range aggs {
		z := ag.Zone()
		if z == "" {
			continue
		}
		for _, h := range ag.Hosts {
			if cur, ok := out[h]; !ok || z < cur {
				out[h] = z
			}
		}
	}
	return out, nil
}

// serviceZone is a service's zone: its host's aggregate zone, else the
// zone its agent registered with, else "nova".
func serviceZone(s records.Service, aggZones map[string]string) string {
	if z := aggZones[s.Host]; z != "" {
		return z
	}
	if s.Zone != "" {
		return s.Zone
	}
	return "nova"
}

// mirror mirrors a membership change into placement; as in Nova, a
// failure there is logged and does not undo the compute aggregate's change.
func (a *aggregatesAPI) mirror(ctx context.Context, host, aggUUID string, add bool) {
	if err := a.mirrorPlacement(ctx, host, aggUUID, add); err != nil {
		a.log.Warn("placement aggregate not updated", "host", host, "aggregate", aggUUID, "add", add, "err", err)
	}
}

// mirrorPlacement adds (or removes) aggregate aggUUID to (from) the
// placement aggregates of host's resource provider, as Nova's API does
// when a host joins or leaves a compute aggregate. A host without a
// provider has nothing to mirror.
func (a *aggregatesAPI) mirrorPlacement(ctx context.Context, host, aggUUID string, add bool) error {
	sums, err := a.store.ProviderSummaries(ctx, nil)
	if err != nil {
		return fmt.Errorf("finding the provider of %s: %w", host, err)
	}
	var rp string
	for _, s := range sums {
		if s.Name == host {
			rp = s.UUID
		}
	}
	if rp == "" {
		return nil
	}
	// The provider's generation guards the read-modify-write; a
	// concurrent change to the provider means reading it again.
	for attempt := 0; attempt < 5; attempt++ {
		var p placement.Provider
		if p, err = a.store.GetProvider(ctx, rp); err != nil {
			break
		}
		aggs := slices.DeleteFunc(slices.Clone(p.Aggregates), func(u string) bool { return u == aggUUID })
		if add {
			aggs = append(aggs, aggUUID)
		}
		slices.Sort(aggs)
		if slices.Equal(aggs, p.Aggregates) {
			return nil
		}
		gen := p.Generation
		if _, err = a.store.SetProviderAggregates(ctx, rp, &gen, aggs); !placement.IsConflict(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("mirroring aggregate %s on the provider of %s: %w", aggUUID, host, err)
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
