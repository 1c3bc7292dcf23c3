package compute

import (
	"context"
	"errors"
	"fmt"

	"keel/internal/placement"
	"keel/internal/records"
	"keel/internal/store"
)

// RegistrationStore is what RegisterHost writes: the host's provider and
// its service record.
type RegistrationStore interface {
	store.Providers
	store.Hosts
}

// RegisterHost creates or updates a host's resource provider (named for
// the host, with cfg's inventories) and its nova-compute service record:
// the one registration an agent's start (over the bus) and the in-process
// cloud (internal/inproc: the simulator's and the tests') go through. svc is the service record to
// create when there is none (Host and Binary are filled in; an empty Zone
// is nova); an existing record only takes its zone. newUUID names a new
// provider. It returns the provider's UUID.
func RegisterHost(ctx context.Context, st RegistrationStore, cfg HostConfig, svc records.Service, newUUID func() string) (string, error) {
	invs := cfg.Inventories()
	uuid := newUUID()
	_, err := st.CreateProvider(ctx, placement.Provider{UUID: uuid, Name: cfg.Host, Inventories: invs})
	if errors.Is(err, store.ErrExists) {
		// Registered before (an agent's restart): find it by name and
		// bring its inventories up to date.
		uuid, err = updateProvider(ctx, st, cfg.Host, invs)
	}
	if err != nil {
		return "", fmt.Errorf("registering the provider of %s: %w", cfg.Host, err)
	}
	if svc.Zone == "" {
		svc.Zone = "nova"
	}
	_, err = st.UpdateService(ctx, cfg.Host, func(s *records.Service) error {
		s.Zone = svc.Zone
		return nil
	})
	if errors.Is(err, store.ErrNotFound) {
		svc.Host, svc.Binary = cfg.Host, "nova-compute"
		err = st.PutService(ctx, svc)
	}
	if err != nil {
		return "", fmt.Errorf("registering the service of %s: %w", cfg.Host, err)
	}
	return uuid, nil
}

// updateProvider sets the inventories of the provider named host, if they
// differ, and returns its UUID.
func updateProvider(ctx context.Context, st store.Providers, host string, invs placement.Inventories) (string, error) {
	sums, err := st.ProviderSummaries(ctx, nil)
	if err != nil {
		return "", err
	}
	for _, s := range sums {
		if s.Name != host {
			continue
		}
		if !sameInventories(s.Inventories, invs) {
			if _, err := st.SetInventories(ctx, s.UUID, s.Generation, invs); err != nil {
				return "", fmt.Errorf("updating the inventories: %w", err)
			}
		}
		return s.UUID, nil
	}
	return "", fmt.Errorf("a provider of that UUID exists under another name: %w", store.ErrExists)
}

func sameInventories(a, b placement.Inventories) bool {
	if len(a) != len(b) {
		return false
	}
	for rc, x := range a {
		if y, ok := b[rc]; !ok || x != y {
			return false
		}
	}
	return true
}
