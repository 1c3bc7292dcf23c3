package libvirt

import (
	"os"
	"testing"
)

// tempDir is the cluster's directory: it outlives each test, and goes
// with the cluster when the package's tests end.
func tempDir() (string, error) { return os.MkdirTemp("", "keel-libvirt-") }

func TestMain(m *testing.M) {
	code := m.Run()
	if cluster != nil {
		_ = cluster.Stop()
		_ = os.RemoveAll(cluster.Dir)
	}
	os.Exit(code)
}
