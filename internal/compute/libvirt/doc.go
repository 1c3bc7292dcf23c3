// Package libvirt is keel's libvirt virt driver: every instance is a
// libvirt domain on the host's libvirtd, reached at Nova's [libvirt]
// connection_uri through the pure-Go RPC client
// github.com/digitalocean/go-libvirt, its XML built with
// libvirt.org/go/libvirtxml. It runs the same guests as the qemu driver
// (keel's tiny boot sector, package qemu/guest, on a disk file per
// instance in Config.Dir, package guestdisk) and has every capability the
// qemu driver has; what the qemu driver writes by hand (the QEMU process,
// its monitor, adoption after a restart, the incoming side of a
// migration) libvirt does.
//
// Guests are named keel-<instance UUID>, with the instance UUID as the
// domain UUID, and carry keel's own metadata element (namespace MetaNS):
// the agent's host, the instance's name, flavor and guest program, and
// the state keel needs beyond libvirt's (building, incoming, migrating
// with the migration ID and destination, resizing, resized, rescued). An
// agent lists only the domains whose metadata names its host, so an agent
// restart, a libvirtd restart (domains are persistent; QEMU runs on) or a
// second agent on the same daemon finds exactly its own.
//
// A live migration is libvirt's peer to peer one: the source's libvirtd
// connects to the destination's at live_migration_scheme://HOST/system
// (HOST the destination's live_migration_inbound_addr, or its host name,
// as Nova), which starts the incoming QEMU itself. pre_live_migration on
// the destination writes the disk and answers the URI and the disk's
// path; the source migrates with a destination XML naming that disk and
// the destination host's metadata. The job belongs to the source daemon,
// not to the agent: an agent killed mid-copy finds it running when it
// starts again and follows it to its end (Resumable, Reattach).
package libvirt
