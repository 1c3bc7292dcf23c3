package layers_test

import (
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// layer places every keel package (its import path less "keel/"): a
// package may import only packages of its own layer or a lower one.
var layer = map[string]int{}

func init() {
	for i, pkgs := range [][]string{
		// 0: utilities that know nothing of keel's records.
		{"internal/clock", "internal/natural", "internal/httpbody", "internal/httproute", "internal/requestid",
			"internal/suggest", "internal/testenv", "internal/placementpeer", "internal/testdisk", "internal/flow",
			"internal/apitest", "internal/e2e", "internal/layers", "internal/sim/chart", "internal/compute/workload",
			"internal/compute/guestdisk", "internal/compute/qemu/qmp", "internal/compute/qemu/guest",
			"internal/compute/libvirt/lvhost", "internal/compute/libvirt/lvhost/lvhosts", "internal/store/postgres/pgtest"},
		// 1, 2: placement's model, then keel's records over it.
		{"internal/placement"},
		{"internal/records"},
		// 3: the pure machines.
		{"internal/boot", "internal/lifecycle", "internal/migration", "internal/plan"},
		// 4: the store's interface.
		{"internal/store"},
		// 5: the store's backends and what reads the store to decide;
		// the image store (its Glance API in the same package imports
		// only utilities), which the conductor writes snapshots to.
		{"internal/store/sqlstore", "internal/store/sqlite", "internal/store/postgres", "internal/store/memory",
			"internal/store/storetest", "internal/store/postgres/postgrestest", "internal/quota",
			"internal/scheduler", "internal/rebalance", "internal/image"},
		// 6: the agent's compute manager and the driver interface.
		{"internal/compute"},
		// 7: what drives compute: the drivers, the audit, the conductor,
		// the scenarios' model.
		{"internal/compute/fake", "internal/compute/qemu", "internal/compute/libvirt", "internal/audit",
			"internal/conductor", "internal/sim/scenario"},
		// 8: the transport between the conductor and the agents.
		{"internal/bus", "internal/rpc", "internal/inproc"},
		// 9: the edges.
		{"internal/agent", "internal/api/computeapi", "internal/api/placementapi", "internal/identity",
			"internal/notify", "internal/config", "internal/sim", "internal/cloudtest"},
		// 10: the server and the client.
		{"internal/server", "internal/client", "internal/novaplan"},
		// 11: commands, benchmarks and what tests them whole.
		{"internal/client/clienttest", "cmd/keel", "bench", "bench/cmd/keelbench", "docs"},
	} {
		for _, p := range pkgs {
			layer[p] = i
		}
	}
}

// TestNoPackageImportsOneAbove reads every package's imports (not its
// tests') and fails on an import of a higher layer, naming it, and on a
// package the table does not place.
func TestNoPackageImportsOneAbove(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata") {
			return filepath.SkipDir
		}
		pkg, err := build.ImportDir(path, 0)
		var noGo *build.NoGoError
		if errors.As(err, &noGo) {
			return nil
		}
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		mine, ok := layer[rel]
		if !ok {
			t.Errorf("package %s has no layer: place it in layers_test.go", rel)
			return nil
		}
		seen++
		for _, imp := range pkg.Imports {
			dep, ok := strings.CutPrefix(imp, "keel/")
			if !ok {
				continue
			}
			if l, ok := layer[dep]; ok && l > mine {
				t.Errorf("%s (layer %d) imports %s (layer %d, above it)", rel, mine, dep, l)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 40 {
		t.Fatalf("checked %d packages; expected keel's %d or so (is the walk rooted at the module?)", seen, len(layer))
	}
}
