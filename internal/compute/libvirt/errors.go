package libvirt

import (
	"errors"
	"fmt"
	"strings"

	golibvirt "github.com/digitalocean/go-libvirt"

	"keel/internal/compute"
)

// describe turns a libvirt error into words an operator understands on a
// migration record: what happened, what to check, then libvirt's own
// message and code. A cancelled job wraps compute.ErrCopyCancelled.
func describe(err error) error {
	if err == nil {
		return nil
	}
	var e golibvirt.Error
	if !errors.As(err, &e) {
		return err
	}
	msg := e.Message
	lower := strings.ToLower(msg)
	why := ""
	switch code := golibvirt.ErrorNumber(e.Code); {
	case code == golibvirt.ErrOperationAborted:
		return fmt.Errorf("the migration job was cancelled in libvirt (libvirt: %s): %w", msg, compute.ErrCopyCancelled)
	case strings.Contains(lower, "same host"):
		why = "the destination's libvirtd has the same host UUID as the source's: give each host its own host_uuid in libvirtd.conf"
	case code == golibvirt.ErrMigrateUnsafe:
		why = "libvirt refused the migration as unsafe for the guest's disk"
	case strings.Contains(lower, "unable to connect to server") || strings.Contains(lower, "connection refused") ||
		strings.Contains(lower, "name or service not known") || strings.Contains(lower, "no route to host") ||
		strings.Contains(lower, "unable to resolve address") || strings.Contains(lower, "name resolution") ||
		code == golibvirt.ErrNoConnect || code == golibvirt.ErrRPC:
		why = "the source's libvirtd could not reach the destination's: check that libvirtd there listens on TCP (listen_tcp, --listen) and that the destination's name or live_migration_inbound_addr resolves from the source"
	case code == golibvirt.ErrAuthFailed || code == golibvirt.ErrAuthCancelled:
		why = "the destination's libvirtd refused the source's credentials (auth_tcp)"
	case strings.Contains(lower, "unable to write to socket") || strings.Contains(lower, "bad file descriptor") ||
		strings.Contains(lower, "broken pipe") || strings.Contains(lower, "connection reset") ||
		strings.Contains(lower, "domain is not running") || strings.Contains(lower, "qemu unexpectedly closed"):
		why = "the memory copy broke off: the destination's QEMU or the network between the hosts went away"
	case code == golibvirt.ErrNoDomain:
		why = "the guest's domain disappeared from libvirt during the operation"
	case code == golibvirt.ErrOperationInvalid:
		why = "the guest is not in a state that allows this"
	case code == golibvirt.ErrOperationTimeout:
		why = "libvirt timed out waiting for QEMU"
	case strings.Contains(lower, "storage pool") || strings.Contains(lower, "no such file"):
		why = "the destination is missing the guest's disk"
	}
	if why == "" {
		return fmt.Errorf("libvirt: %s (error %d)", msg, e.Code)
	}
	return fmt.Errorf("%s (libvirt: %s, error %d)", why, msg, e.Code)
}
