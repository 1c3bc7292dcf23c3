package client

import (
	"fmt"
	"os"
	"strings"

	"keel/internal/api/computeapi"
)

// Account is one cloud of a clouds.yaml: a user logging in to its project
// (of the same name) with its password.
type Account struct {
	Cloud, User, Password string
}

// WriteCloudsYAML writes a clouds.yaml that logs in to the keel at baseURL
// (http://host:port): cloud DefaultCloud as admin with adminPassword, then
// one cloud per extra account (keel dev calls it with keel-demo and
// keel-alt_demo; openstackclient and this package read the file). The
// file is written atomically with mode 0600: it holds the passwords.
func WriteCloudsYAML(path, baseURL, adminPassword string, extra ...Account) error {
	var b strings.Builder
	fmt.Fprintf(&b, `# Written by keel dev. Use with:
#   export OS_CLIENT_CONFIG_FILE=%s
#   openstack --os-cloud %s server list
clouds:
`, path, DefaultCloud)
	for _, a := range append([]Account{{DefaultCloud, "admin", adminPassword}}, extra...) {
		fmt.Fprintf(&b, `  %s:
    auth:
      auth_url: %s/identity/v3
      username: %s
      password: %s
      project_name: %s
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    identity_api_version: 3
    interface: public
    # keel's newest compute microversion: openstackclient otherwise asks
    # for 2.1, where "server create --nic none" is refused.
    compute_api_version: "%s"
`, a.Cloud, baseURL, a.User, a.Password, a.User, computeapi.MaxVersion)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
