package client

import (
	"fmt"
	"os"

	"gopkg.in/yaml.v2"
)

// cloudExtras are the keys of a clouds.yaml cloud that gophercloud's
// parser does not return but openstacksdk honours: a token given as is
// (auth_type admin_token, as for a Nova run with noauth2 or a service
// token) and endpoints that override the catalog's.
type cloudExtras struct {
	AuthType string `yaml:"auth_type"`
	Auth     struct {
		Token    string `yaml:"token"`
		Endpoint string `yaml:"endpoint"`
	} `yaml:"auth"`
	ComputeOverride   string `yaml:"compute_endpoint_override"`
	PlacementOverride string `yaml:"placement_endpoint_override"`
	RegionName        string `yaml:"region_name"`
}

// tokenAuth reports whether the cloud logs in with a given token and no
// identity service.
func (e cloudExtras) tokenAuth() bool {
	return e.AuthType == "admin_token" || e.AuthType == "none" || e.AuthType == "noauth"
}

// readExtras reads cloud's extra keys from the clouds.yaml at path.
func readExtras(path, cloud string) (cloudExtras, bool, error) {
	if path == "" {
		return cloudExtras{}, false, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cloudExtras{}, false, fmt.Errorf("reading %s: %w", path, err)
	}
	var f struct {
		Clouds map[string]cloudExtras `yaml:"clouds"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return cloudExtras{}, false, fmt.Errorf("reading %s: %w", path, err)
	}
	e, ok := f.Clouds[cloud]
	return e, ok, nil
}
