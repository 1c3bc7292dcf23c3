package computeapi

import (
	"net/http"
)

// extension is one entry of GET /extensions: the v2 API's extensions,
// which Nova's v2.1 still lists (a fixed list, whatever the deployment)
// for clients written against v2.
type extension struct {
	alias, name, description string
}

// extensions are the v2 extensions whose API keel serves, under Nova's
// aliases and names (the identifiers clients look for); the descriptions
// are keel's own. Nova's further ones (networks, volumes, cells, …) are
// left out: keel does not serve them. os-consoles stays, as clients (and
// Tempest) look it up in every Nova.
var extensions = []extension{
	{"OS-DCF", "DiskConfig", "A server's disk config (AUTO or MANUAL)."},
	{"OS-EXT-AZ", "ExtendedAvailabilityZone", "A server's availability zone in its view."},
	{"OS-EXT-SRV-ATTR", "ExtendedServerAttributes", "A server's host and hypervisor in its view (admin)."},
	{"OS-EXT-STS", "ExtendedStatus", "A server's vm, task and power states in its view."},
	{"OS-FLV-DISABLED", "FlavorDisabled", "Whether a flavor is disabled."},
	{"OS-FLV-EXT-DATA", "FlavorExtraData", "A flavor's ephemeral disk."},
	{"OS-SCH-HNT", "SchedulerHints", "Scheduler hints at boot."},
	{"OS-SRV-USG", "ServerUsage", "A server's launch and termination times."},
	{"os-access-ips", "AccessIPs", "A server's access addresses."},
	{"os-admin-actions", "AdminActions", "Reset a server's state, inject its network info (admin)."},
	{"os-aggregates", "Aggregates", "Host aggregates."},
	{"os-availability-zone", "AvailabilityZone", "Availability zones."},
	{"os-console-output", "ConsoleOutput", "A server's serial console log."},
	{"os-consoles", "Consoles", "Interactive consoles (Nova lists it in every deployment; keel serves the console log, no console proxy)."},
	{"os-deferred-delete", "DeferredDelete", "Force delete and restore (keel deletes at once)."},
	{"os-evacuate", "Evacuate", "Rebuild a server of a failed host on another."},
	{"os-extended-hypervisors", "ExtendedHypervisors", "More hypervisor fields."},
	{"os-extended-services", "ExtendedServices", "A disabled service's reason."},
	{"os-flavor-access", "FlavorAccess", "Private flavors and their projects."},
	{"os-flavor-extra-specs", "FlavorExtraSpecs", "Flavor extra specs."},
	{"os-flavor-manage", "FlavorManage", "Flavor create and delete (admin)."},
	{"os-flavor-rxtx", "FlavorRxtx", "A flavor's rxtx factor."},
	{"os-flavor-swap", "FlavorSwap", "A flavor's swap."},
	{"os-hosts", "Hosts", "Hosts and their resources (admin)."},
	{"os-hypervisor-status", "HypervisorStatus", "A hypervisor's status and state."},
	{"os-hypervisors", "Hypervisors", "Hypervisors (admin)."},
	{"os-instance-actions", "InstanceActions", "A server's actions and their events."},
	{"os-instance_usage_audit_log", "OSInstanceUsageAuditLog", "The usage audit log (admin)."},
	{"os-keypairs", "Keypairs", "Key pairs."},
	{"os-lock-server", "LockServer", "Lock and unlock a server."},
	{"os-migrate-server", "MigrateServer", "Cold and live migration (admin)."},
	{"os-migrations", "Migrations", "Migrations (admin)."},
	{"os-multiple-create", "MultipleCreate", "Several servers in one boot request."},
	{"os-pause-server", "PauseServer", "Pause and unpause a server."},
	{"os-personality", "Personality", "Files injected at boot and rebuild."},
	{"os-quota-sets", "Quotas", "Project quotas."},
	{"os-rescue", "Rescue", "Rescue and unrescue a server."},
	{"os-server-diagnostics", "ServerDiagnostics", "A server's diagnostics (admin)."},
	{"os-server-external-events", "ServerExternalEvents", "Events from other services (admin)."},
	{"os-server-groups", "ServerGroups", "Server groups and their policies."},
	{"os-server-password", "ServerPassword", "A server's password as its guest posted it (always empty: keel has no metadata service)."},
	{"os-server-start-stop", "ServerStartStop", "Start and stop a server."},
	{"os-services", "Services", "Compute services: list, enable, disable, force down, delete."},
	{"os-shelve", "Shelve", "Shelve, offload and unshelve a server."},
	{"os-simple-tenant-usage", "SimpleTenantUsage", "Usage per project."},
	{"os-suspend-server", "SuspendServer", "Suspend and resume a server."},
	{"os-user-data", "UserData", "User data at boot."},
}

func (e extension) view() map[string]any {
	return map[string]any{"alias": e.alias, "name": e.name, "description": e.description, "links": []any{},
		"namespace": "http://docs.openstack.org/compute/ext/fake_xml", "updated": "2014-12-03T00:00:00Z"}
}

// listExtensions is GET /extensions (any caller, as Nova's policy).
func (a *API) listExtensions(w http.ResponseWriter, r *http.Request) error {
	out := make([]any, 0, len(extensions))
	for _, e := range extensions {
		out = append(out, e.view())
	}
	writeJSON(w, http.StatusOK, map[string]any{"extensions": out})
	return nil
}

// showExtension is GET /extensions/{alias}.
func (a *API) showExtension(w http.ResponseWriter, r *http.Request) error {
	for _, e := range extensions {
		if e.alias == r.PathValue("alias") {
			writeJSON(w, http.StatusOK, map[string]any{"extension": e.view()})
			return nil
		}
	}
	return notFound("The resource could not be found.")
}
