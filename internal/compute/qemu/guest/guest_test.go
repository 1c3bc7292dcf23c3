package guest

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"keel/internal/testenv"
)

// TestEmbeddedSectorIsCurrent assembles guest.S again and compares: the
// embedded guest.bin must be what its documented source builds.
func TestEmbeddedSectorIsCurrent(t *testing.T) {
	testenv.External(t, "as and objcopy (Debian's binutils)")
	for _, tool := range []string{"as", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: install Debian's binutils (apt-get install binutils) to check guest.bin against guest.S", tool)
		}
	}
	dir := t.TempDir()
	obj, bin := filepath.Join(dir, "guest.o"), filepath.Join(dir, "guest.bin")
	for _, args := range [][]string{{"as", "--32", "-o", obj, "guest.S"}, {"objcopy", "-O", "binary", "-j", ".text", obj, bin}} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	got, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sector) {
		t.Fatalf("guest.bin is stale: rebuild it from guest.S (see its header)")
	}
}

func TestImage(t *testing.T) {
	if len(sector) != 512 || sector[510] != 0x55 || sector[511] != 0xaa {
		t.Fatalf("guest.bin is not a boot sector: %d bytes, signature %x", len(sector), sector[510:])
	}
	cases := []struct {
		ref  string
		want Spec
	}{
		{"", Spec{Mode: Idle}},
		{"idle", Spec{Mode: Idle}},
		{"fill-48", Spec{Mode: Fill, MiB: 48}},
		{"dirty-16", Spec{Mode: Dirty, MiB: 16}},
	}
	for _, c := range cases {
		got, err := Parse(c.ref)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", c.ref, got, err, c.want)
			continue
		}
		if back, _ := Parse(got.String()); back != got {
			t.Errorf("%v does not round-trip through %q", got, got.String())
		}
		img := got.Image()
		if Mode(img[modeOffset]) != got.Mode || int(binary.LittleEndian.Uint16(img[mibOffset:])) != got.MiB {
			t.Errorf("%v: image carries mode %c, %d MiB", got, img[modeOffset], binary.LittleEndian.Uint16(img[mibOffset:]))
		}
	}
	for _, bad := range []string{"fill-", "dirty-0", "fill-x", "dirty-70000", "busy", "keel-fake"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestParseHeartbeat reads xp's output as QEMU prints it, and refuses
// memory without the magic word or with the wrong word count.
func TestParseHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want uint32
		ok   bool
	}{
		{"0000000000001000: 0x000000d9 0x4c45454b\r\n", 0xd9, true},
		{"0000000000001000: 0x000000d9 0x00000000\r\n", 0, false},
		{"0000000000001000: 0x000000d9\r\n", 0, false},
		{"", 0, false},
	} {
		got, err := ParseHeartbeat(tc.out)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseHeartbeat(%q) = %d, %v; want %d, ok=%v", tc.out, got, err, tc.want, tc.ok)
		}
	}
}
