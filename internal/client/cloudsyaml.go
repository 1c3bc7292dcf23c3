package client

import (
	"fmt"
	"os"

	"keel/internal/api/compute"
)

// WriteCloudsYAML writes a clouds.yaml with one cloud, DefaultCloud, that
// logs in to the keel at baseURL (http://host:port) as admin with password
// (keel dev calls it; openstackclient and this package read the file).
// The file is written atomically with mode 0600: it holds the password.
func WriteCloudsYAML(path, baseURL, password string) error {
	text := fmt.Sprintf(`# Written by keel dev. Use with:
#   export OS_CLIENT_CONFIG_FILE=%s
#   openstack --os-cloud %s server list
clouds:
  %s:
    auth:
      auth_url: %s/identity/v3
      username: admin
      password: %s
      project_name: admin
      user_domain_name: Default
      project_domain_name: Default
    region_name: RegionOne
    identity_api_version: 3
    interface: public
    # keel's newest compute microversion: openstackclient otherwise asks
    # for 2.1, where "server create --nic none" is refused.
    compute_api_version: "%s"
`, path, DefaultCloud, DefaultCloud, baseURL, password, compute.MaxVersion)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
