package libvirt

import (
	"encoding/xml"
	"fmt"
	"path/filepath"
	"strings"

	"libvirt.org/go/libvirtxml"

	"keel/internal/compute"
	"keel/internal/records"
)

// MetaNS is the namespace of keel's metadata element in a domain's XML
// (`virsh metadata keel-UUID --uri MetaNS`).
const MetaNS = "https://keel.dev/xmlns/libvirt/guest/1"

// metaKey is the element's prefix in the domain XML.
const metaKey = "keel"

// Keel's states beyond libvirt's, kept in the metadata.
const (
	stBuilding  = "building"
	stIncoming  = "incoming"
	stMigrating = "migrating"
	stResizing  = "resizing"
	stResized   = "resized"
	stRescued   = "rescued"
)

// meta is keel's metadata element.
type meta struct {
	XMLName xml.Name `xml:"guest"`
	// Host is the agent's host the guest belongs to.
	Host    string `xml:"host,attr"`
	Name    string `xml:"name,attr"`
	Program string `xml:"program,attr,omitempty"`
	// Image is the uploaded image the guest boots (its disk a qcow2
	// overlay on the image's base); empty for keel's built-in guest.
	Image string `xml:"image,attr,omitempty"`
	State string `xml:"state,attr,omitempty"`
	// Migration, Dest and Paused describe the live migration while State
	// is migrating (or incoming, on the destination).
	Migration int64  `xml:"migration,attr,omitempty"`
	Dest      string `xml:"dest,attr,omitempty"`
	Paused    bool   `xml:"paused,attr,omitempty"`
	PostCopy  bool   `xml:"postcopy,attr,omitempty"`
	// RescueImage, RescueBus and RescueDevice are the rescue disk's
	// (records.Rescue) while State is rescued: the domain is defined with
	// it (domainXML) until the unrescue.
	RescueImage  string     `xml:"rescue_image,attr,omitempty"`
	RescueBus    string     `xml:"rescue_bus,attr,omitempty"`
	RescueDevice string     `xml:"rescue_device,attr,omitempty"`
	Flavor       metaFlavor `xml:"flavor"`
}

// rescue is the rescue disk m records (nil when not rescued).
func (m meta) rescue() *records.Rescue {
	if m.State != stRescued {
		return nil
	}
	return &records.Rescue{ImageID: m.RescueImage, Bus: m.RescueBus, Device: m.RescueDevice}
}

type metaFlavor struct {
	ID     string `xml:"id,attr"`
	Name   string `xml:"name,attr"`
	VCPUs  int64  `xml:"vcpus,attr"`
	RAMMB  int64  `xml:"ram_mb,attr"`
	DiskGB int64  `xml:"disk_gb,attr"`
}

func flavorMeta(f records.Flavor) metaFlavor {
	return metaFlavor{ID: f.ID, Name: f.Name, VCPUs: f.VCPUs, RAMMB: f.RAMMB, DiskGB: f.DiskGB}
}

func (f metaFlavor) flavor() records.Flavor {
	return records.Flavor{ID: f.ID, Name: f.Name, VCPUs: f.VCPUs, RAMMB: f.RAMMB, DiskGB: f.DiskGB}
}

// element is the metadata as DomainSetMetadata takes it (libvirt puts it
// in MetaNS under metaKey).
func (m meta) element() string {
	b, err := xml.Marshal(m)
	if err != nil {
		panic(err) // plain strings and numbers
	}
	return string(b)
}

// qualified is the element as it appears in a domain's XML.
func (m meta) qualified() string {
	s := m.element()
	s = strings.Replace(s, "<guest ", fmt.Sprintf("<%s:guest xmlns:%s=%q ", metaKey, metaKey, MetaNS), 1)
	s = strings.Replace(s, "<flavor ", "<"+metaKey+":flavor ", 1)
	s = strings.Replace(s, "</flavor>", "</"+metaKey+":flavor>", 1)
	return strings.Replace(s, "</guest>", "</"+metaKey+":guest>", 1)
}

func parseMeta(s string) (meta, error) {
	var m meta
	if err := xml.Unmarshal([]byte(s), &m); err != nil {
		return m, fmt.Errorf("reading keel's metadata: %w", err)
	}
	return m, nil
}

// metaIn finds keel's element in a domain's <metadata>.
func metaIn(d *libvirtxml.Domain) (meta, bool) {
	if d.Metadata == nil {
		return meta{}, false
	}
	dec := xml.NewDecoder(strings.NewReader(d.Metadata.XML))
	for {
		tok, err := dec.Token()
		if err != nil {
			return meta{}, false
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Space == MetaNS && se.Name.Local == "guest" {
			var m meta
			if dec.DecodeElement(&m, &se) != nil {
				return meta{}, false
			}
			return m, true
		}
	}
}

// setMetaIn replaces keel's element in a domain's <metadata>, keeping
// any other application's.
func setMetaIn(d *libvirtxml.Domain, m meta) {
	var others strings.Builder
	if d.Metadata != nil {
		dec := xml.NewDecoder(strings.NewReader(d.Metadata.XML))
		depth, skip := 0, false
		start := int64(0)
		for {
			off := dec.InputOffset()
			tok, err := dec.Token()
			if err != nil {
				break
			}
			switch t := tok.(type) {
			case xml.StartElement:
				if depth == 0 {
					skip = t.Name.Space == MetaNS
					start = off
				}
				depth++
			case xml.EndElement:
				depth--
				if depth == 0 && !skip {
					others.WriteString(d.Metadata.XML[start:dec.InputOffset()])
				}
			}
		}
	}
	d.Metadata = &libvirtxml.DomainMetadata{XML: others.String() + m.qualified()}
}

// DomainName is the libvirt domain name of an instance's guest.
func DomainName(uuid string) string { return "keel-" + uuid }

// domainXML is the domain of a guest: the flavor's RAM and vCPUs, the
// guest's disk file (IDE, raw, as the qemu driver's; a qcow2 overlay for
// an uploaded image), its first serial
// port logged to the console log beside the disk, no USB, no balloon (the
// tiny guest has no drivers), keel's metadata.
func (d *Driver) domainXML(uuid string, flavor records.Flavor, disk string, m meta) (string, error) {
	vcpus := max(flavor.VCPUs, 1)
	port := uint(0)
	format := "raw"
	if m.Image != "" {
		format = "qcow2"
	}
	dom := &libvirtxml.Domain{
		Type: d.cfg.VirtType, Name: DomainName(uuid), UUID: uuid,
		Memory: &libvirtxml.DomainMemory{Value: uint(flavor.RAMMB), Unit: "MiB"},
		VCPU:   &libvirtxml.DomainVCPU{Value: uint(vcpus)},
		OS: &libvirtxml.DomainOS{
			Type:        &libvirtxml.DomainOSType{Arch: "x86_64", Machine: "pc", Type: "hvm"},
			BootDevices: []libvirtxml.DomainBootDevice{{Dev: "hd"}},
		},
		OnPoweroff: "destroy", OnReboot: "restart", OnCrash: "destroy",
		Devices: &libvirtxml.DomainDeviceList{
			Disks: []libvirtxml.DomainDisk{{
				Device: "disk",
				Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format, Cache: "none"},
				Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: disk}},
				Target: &libvirtxml.DomainDiskTarget{Dev: "hda", Bus: "ide"},
			}},
			Serials: []libvirtxml.DomainSerial{{
				Source: consoleSource(disk),
				Target: &libvirtxml.DomainSerialTarget{Port: &port},
			}},
			Controllers: []libvirtxml.DomainController{{Type: "usb", Model: "none"}},
			MemBalloon:  &libvirtxml.DomainMemBalloon{Model: "none"},
		},
	}
	if rs := m.rescue(); rs != nil {
		if err := rescueDisks(dom, disk, *rs); err != nil {
			return "", err
		}
	}
	m.Flavor = flavorMeta(flavor)
	setMetaIn(dom, m)
	return dom.Marshal()
}

// fileRescue is a rescued guest's rescue disk, beside its own (Nova's
// libvirt driver names its own disk.rescue too).
const fileRescue = "disk.rescue"

// rescueDisks adds a rescued guest's rescue disk to dom, as Nova's
// libvirt driver defines a rescued domain: its legacy rescue boots the
// rescue disk as the first IDE disk, the guest's own second; a
// stable-device rescue keeps the guest's disk where it is and adds the
// rescue disk on the bus and device asked for (compute.RescueTarget),
// booted first (boot order 1, the guest's disk 2).
func rescueDisks(dom *libvirtxml.Domain, disk string, rs records.Rescue) error {
	format := "raw"
	if rs.ImageID != "" && rs.ImageID != compute.BuiltinImageID {
		format = "qcow2"
	}
	own := &dom.Devices.Disks[0]
	rescue := libvirtxml.DomainDisk{
		Device: "disk",
		Driver: &libvirtxml.DomainDiskDriver{Name: "qemu", Type: format, Cache: "none"},
		Source: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: filepath.Join(filepath.Dir(disk), fileRescue)}},
		Target: &libvirtxml.DomainDiskTarget{Dev: "hda", Bus: "ide"},
	}
	if !rs.Stable() {
		own.Target.Dev = "hdb"
		dom.Devices.Disks = []libvirtxml.DomainDisk{rescue, *own}
		return nil
	}
	device, bus, err := compute.RescueTarget(rs)
	if err != nil {
		return err
	}
	dev := map[string]string{"virtio": "vda", "scsi": "sda", "usb": "sdb", "ide": "hdc", "sata": "sdc"}[bus]
	rescue.Device, rescue.Target = device, &libvirtxml.DomainDiskTarget{Dev: dev, Bus: bus}
	if device == "cdrom" {
		rescue.ReadOnly = &libvirtxml.DomainDiskReadOnly{}
	}
	rescue.Boot, own.Boot = &libvirtxml.DomainDeviceBoot{Order: 1}, &libvirtxml.DomainDeviceBoot{Order: 2}
	dom.OS.BootDevices = nil // per-device boot order instead
	switch bus {
	case "scsi":
		dom.Devices.Controllers = append(dom.Devices.Controllers, libvirtxml.DomainController{Type: "scsi", Model: "virtio-scsi"})
	case "usb":
		dom.Devices.Controllers[0].Model = "qemu-xhci"
	}
	dom.Devices.Disks = append(dom.Devices.Disks, rescue)
	return nil
}

// consoleSource is a serial port's source that appends to the console
// log in the directory of the guest's disk (libvirt opens it for QEMU;
// append mode, so the driver's rotation can empty it under QEMU).
func consoleSource(disk string) *libvirtxml.DomainChardevSource {
	return &libvirtxml.DomainChardevSource{File: &libvirtxml.DomainChardevSourceFile{
		Path: filepath.Join(filepath.Dir(disk), compute.ConsoleLogFile), Append: "on"}}
}

// guestOf is keel's view of a domain: its metadata and libvirt's state.
func guestOf(uuid string, m meta, state, reason int32, managedSave bool) compute.Guest {
	g := compute.Guest{UUID: uuid, Name: m.Name, Flavor: m.Flavor.flavor(), State: liveState(m, state, reason, managedSave), Rescue: m.rescue()}
	if g.State == compute.GuestMigrating {
		g.MigrationID, g.Paused = m.Migration, m.Paused
	}
	return g
}

// liveState maps libvirt's state and reason, with keel's own, to a guest
// state.
func liveState(m meta, state, reason int32, managedSave bool) compute.GuestState {
	switch m.State {
	case stBuilding:
		return compute.GuestBuilding
	case stIncoming:
		return compute.GuestIncoming
	case stMigrating:
		return compute.GuestMigrating
	case stResizing:
		return compute.GuestResizing
	case stResized:
		return compute.GuestResized
	}
	switch state {
	case stateRunning:
		if m.State == stRescued {
			return compute.GuestRescued
		}
		return compute.GuestRunning
	case statePaused:
		return compute.GuestPaused
	case stateShutoff, stateShutdown, stateCrashed:
		if managedSave {
			return compute.GuestSuspended
		}
		return compute.GuestStopped
	}
	return compute.GuestRunning // blocked, pmsuspended: the guest runs
}
