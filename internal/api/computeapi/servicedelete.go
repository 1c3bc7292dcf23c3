package computeapi

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"keel/internal/placement"
	"keel/internal/store"
)

// deleteService is DELETE /os-services/{id}: the id is the service's
// UUID from 2.53, its integer id before. As Nova, it refuses (409) while
// the host has instances or migrations in progress; otherwise the
// service record, the host's record (its hypervisor), its provider tree
// and its aggregate membership go in one store transaction
// (store.Hosts.DeleteService). Unlike Nova, which logs a provider it
// could not delete and leaves it behind, keel also refuses while a
// provider of the host's tree holds allocations (a build not yet on the
// host, a consumer placement's API wrote). An agent still running
// registers its host again at its next heartbeat, as a restarted
// nova-compute does (docs/openstack.md).
func (a *servicesAPI) deleteService(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	svcs, err := a.computeServices(r.Context())
	if err != nil {
		return err
	}
	host := ""
	if version(r).AtLeast(53) {
		if uuid.Validate(id) != nil {
			return badRequest("Invalid uuid " + id)
		}
		for _, s := range svcs {
			if serviceID(s.Host) == id {
				host = s.Host
			}
		}
	} else {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil {
			return badRequest("Invalid input received: id must be an integer")
		}
		for _, s := range svcs {
			if intID(s.Host) == n {
				host = s.Host
			}
		}
	}
	if host == "" {
		return notFoundf("Service %s not found.", id)
	}
	_, err = a.store.DeleteService(r.Context(), host)
	var inUse *placement.InUseError
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
		return nil
	case isNotFound(err):
		return notFoundf("Service %s not found.", id)
	case errors.Is(err, store.ErrHostHasInstances):
		return conflict("Unable to delete compute service that is hosting instances. Migrate or delete the instances first.")
	case errors.Is(err, store.ErrHostHasMigrations):
		return conflict("Unable to delete compute service that has in-progress migrations. Complete the migrations or delete the instances first.")
	case errors.As(err, &inUse):
		return conflict("Unable to delete compute service whose resource provider " + inUse.Provider +
			" holds allocations. Delete the allocations (or wait for the build in progress) first.")
	}
	return err
}
