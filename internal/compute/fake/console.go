package fake

import (
	"context"
	"fmt"
	"strings"

	"keel/internal/compute"
)

// maxConsoleEvents bounds the events a guest's synthetic log keeps: the
// oldest go first, as a rotated serial log's do.
const maxConsoleEvents = 100

// consoleEventLocked adds a lifecycle operation's line to the guest's
// synthetic console log. Called with mu held.
func (d *Driver) consoleEventLocked(uuid, op string, state compute.GuestState) {
	ev := append(d.consoles[uuid], fmt.Sprintf("keel fake guest: %s, now %s", op, state))
	if len(ev) > maxConsoleEvents {
		ev = ev[len(ev)-maxConsoleEvents:]
	}
	d.consoles[uuid] = ev
}

// ConsoleOutput implements compute.ConsoleReader: the fake guest's short
// synthetic serial log — a boot banner made from the guest's record (its
// name, UUID and flavor), then a line per lifecycle operation this driver
// ran on it since it started (at most maxConsoleEvents). A stopped guest
// has its log too.
func (d *Driver) ConsoleOutput(_ context.Context, uuid string) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, ok := d.guests[uuid]
	if !ok || g.State == compute.GuestIncoming {
		return nil, compute.NoGuest(uuid)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "keel fake hypervisor: serial console of %s (%s)\n", g.Name, g.UUID)
	fmt.Fprintf(&b, "keel fake guest: booting with %d vCPUs and %d MiB of RAM\n", g.Flavor.VCPUs, g.Flavor.RAMMB)
	fmt.Fprintf(&b, "keel fake guest: root disk of %d GiB\n", g.Flavor.DiskGB)
	fmt.Fprintf(&b, "keel fake guest: started\n")
	fmt.Fprintf(&b, "%s login:\n", g.Name)
	for _, ev := range d.consoles[uuid] {
		b.WriteString(ev + "\n")
	}
	out := []byte(b.String())
	if len(out) > compute.MaxConsoleBytes {
		out = out[len(out)-compute.MaxConsoleBytes:]
	}
	return out, nil
}
