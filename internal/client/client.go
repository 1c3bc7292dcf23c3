// Package client talks to a keel cloud the way openstackclient does: it
// reads clouds.yaml (OS_CLIENT_CONFIG_FILE, or ./clouds.yaml,
// ./.keel/clouds.yaml — keel dev's —, ~/.config/openstack/clouds.yaml,
// /etc/openstack/clouds.yaml), logs in
// with the cloud's password through the identity v3 API, finds the compute
// endpoint in the token's catalog and calls it with a chosen microversion
// (gophercloud v2 underneath). It also calls keel's own admin endpoints
// under /keel/v1 (the audit and the scheduler's explanation), on the same
// host and port as the compute endpoint, with the same token.
//
// The `keel host`, `keel server …`, `keel migration`, `keel schedule` and
// `keel audit` commands are thin layers over this package.
package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	osconfig "github.com/gophercloud/gophercloud/v2/openstack/config"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
	"gopkg.in/yaml.v2"
)

// DefaultCloud is the cloud name used when neither --os-cloud nor OS_CLOUD
// names one: the cloud `keel dev` writes.
const DefaultCloud = "keel"

// DefaultMicroversion is the compute API microversion the client asks for:
// 2.30 lets os-migrateLive name a host (and use block_migration "auto"),
// reports pre-check failures synchronously, and lists migrations with
// their type (2.23+).
const DefaultMicroversion = "2.30"

// ErrNoCloudsYAML is returned (wrapped) by Connect when no clouds.yaml is
// found.
var ErrNoCloudsYAML = errors.New("no clouds.yaml")

// ErrNotFound is returned (wrapped) when a named server, flavor or
// migration does not exist.
var ErrNotFound = errors.New("not found")

// Options say which cloud to use and how to talk to it.
type Options struct {
	// Cloud names the clouds.yaml entry; "" means $OS_CLOUD, then
	// DefaultCloud.
	Cloud string
	// ConfigFile is the clouds.yaml to read; "" means $OS_CLIENT_CONFIG_FILE,
	// then openstackclient's search path.
	ConfigFile string
	// Microversion is the compute API microversion; "" means
	// DefaultMicroversion.
	Microversion string
	// Getenv reads the environment the client is run in (OS_CLOUD,
	// OS_CLIENT_CONFIG_FILE, XDG_CONFIG_HOME, HOME); nil means the
	// process's (os.Getenv).
	Getenv func(string) string
	// Dir is the working directory the client is run in: a relative
	// clouds.yaml (./clouds.yaml, ./.keel/clouds.yaml, a relative
	// ConfigFile) is found from it; "" means the process's.
	Dir string
}

// getenv reads the variable key of the environment o runs in.
func (o Options) getenv(key string) string {
	if o.Getenv == nil {
		return os.Getenv(key)
	}
	return o.Getenv(key)
}

// path resolves p, relative to the working directory, against o.Dir.
func (o Options) path(p string) string {
	if p == "" || o.Dir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(o.Dir, p)
}

// parseEnv are the variables gophercloud's clouds.Parse reads from the
// process (OS_REGION_NAME, OS_INTERFACE, OS_CACERT, OS_CERT, OS_KEY),
// taken from Getenv instead when it is set.
func (o Options) parseEnv() []clouds.ParseOption {
	if o.Getenv == nil {
		return nil
	}
	var opts []clouds.ParseOption
	for _, v := range []struct {
		key  string
		path bool
		opt  func(string) clouds.ParseOption
	}{
		{"OS_REGION_NAME", false, clouds.WithRegion},
		{"OS_INTERFACE", false, clouds.WithEndpointType},
		{"OS_CACERT", true, clouds.WithCACertPath},
		{"OS_CERT", true, clouds.WithClientCertPath},
		{"OS_KEY", true, clouds.WithClientKeyPath},
	} {
		if val := o.Getenv(v.key); val != "" {
			if v.path {
				val = o.path(val)
			}
			opts = append(opts, v.opt(val))
		}
	}
	return opts
}

// configFile is the clouds.yaml Connect reads: ConfigFile, else
// $OS_CLIENT_CONFIG_FILE; "" when neither names one (the search path is
// then looked through).
func (o Options) configFile() string {
	if o.ConfigFile != "" {
		return o.ConfigFile
	}
	return o.getenv("OS_CLIENT_CONFIG_FILE")
}

// CloudName resolves a cloud name as openstackclient does: the flag's
// value, else $OS_CLOUD, else DefaultCloud.
func CloudName(flag string) string { return Options{}.cloudName(flag) }

// cloudName is CloudName in the environment o runs in.
func (o Options) cloudName(flag string) string {
	if flag != "" {
		return flag
	}
	if env := o.getenv("OS_CLOUD"); env != "" {
		return env
	}
	return DefaultCloud
}

// cloudsYAMLPlaces are where a clouds.yaml is looked for when neither
// --os-config-file nor OS_CLIENT_CONFIG_FILE names one, in order:
// openstackclient's places, with keel dev's default data dir after the
// working directory.
var cloudsYAMLPlaces = []string{"./clouds.yaml", "./.keel/clouds.yaml", "~/.config/openstack/clouds.yaml", "/etc/openstack/clouds.yaml"}

// findCloudsYAML returns the first of cloudsYAMLPlaces that exists in
// the environment o runs in, or "".
func (o Options) findCloudsYAML() string {
	for _, p := range cloudsYAMLPlaces {
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			dir := o.getenv("XDG_CONFIG_HOME")
			if home := o.homeDir(); dir == "" && home != "" {
				dir = filepath.Join(home, ".config")
			}
			if dir == "" {
				continue
			}
			p = filepath.Join(dir, strings.TrimPrefix(rest, ".config/"))
		}
		p = o.path(p)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	return ""
}

// homeDir is the user's home directory ("" when there is none): the
// process's, or $HOME of the environment Getenv reads.
func (o Options) homeDir() string {
	if o.Getenv != nil {
		return o.Getenv("HOME")
	}
	home, _ := os.UserHomeDir()
	return home
}

// cloudNames lists the clouds a clouds.yaml holds, sorted (nil if it
// cannot be read).
func cloudNames(file string) []string {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var cs clouds.Clouds
	if yaml.Unmarshal(data, &cs) != nil {
		return nil
	}
	return slices.Sorted(maps.Keys(cs.Clouds))
}

// Client is a logged-in connection to one cloud.
type Client struct {
	cloud string
	// cloudsYAML is the clouds.yaml the cloud was read from (absolute).
	cloudsYAML string
	compute    *gophercloud.ServiceClient
	keel       *gophercloud.ServiceClient
	// placement is the placement API (nil when the cloud has none in its
	// catalog and no placement_endpoint_override); placementErr says why.
	placement    *gophercloud.ServiceClient
	placementErr error
}

// Connect reads clouds.yaml, logs in and finds the compute endpoint.
func Connect(ctx context.Context, opts Options) (*Client, error) {
	cloud := opts.cloudName(opts.Cloud)
	parse := []clouds.ParseOption{clouds.WithCloudName(cloud)}
	file := opts.path(opts.configFile())
	if file != "" {
		if _, err := os.Stat(file); err != nil {
			return nil, fmt.Errorf("%w at %s (OS_CLIENT_CONFIG_FILE): run `keel dev` and `export OS_CLIENT_CONFIG_FILE=DATA_DIR/clouds.yaml`, or pass --os-cloud", ErrNoCloudsYAML, file)
		}
	} else {
		file = opts.findCloudsYAML()
		if file == "" {
			return nil, fmt.Errorf("%w (looked in %s): run `keel dev` and `export OS_CLIENT_CONFIG_FILE=DATA_DIR/clouds.yaml`, or pass --os-cloud", ErrNoCloudsYAML, strings.Join(cloudsYAMLPlaces, ", "))
		}
	}
	extras, _, err := readExtras(file, cloud)
	if err != nil {
		return nil, err
	}
	if extras.tokenAuth() {
		return connectToken(cloud, file, extras, opts)
	}
	parse = append(parse, clouds.WithLocations(file))
	parse = append(parse, opts.parseEnv()...)
	ao, eo, tlsConfig, err := clouds.Parse(parse...)
	if err != nil {
		if strings.Contains(err.Error(), "not found in clouds.yaml") {
			return nil, fmt.Errorf("cloud %q is not in %s (its clouds: %s): pass --os-cloud NAME or set OS_CLOUD (keel dev writes a cloud named %q)",
				cloud, file, orNone(cloudNames(file)), DefaultCloud)
		}
		return nil, fmt.Errorf("reading %s for cloud %q: %w", file, cloud, err)
	}
	if ao.IdentityEndpoint == "" {
		return nil, fmt.Errorf("cloud %q in clouds.yaml has no auth.auth_url", cloud)
	}
	// A wait may outlive the token (keel's token_ttl is an hour by default).
	ao.AllowReauth = true
	pc, err := osconfig.NewProviderClient(ctx, ao, osconfig.WithTLSConfig(tlsConfig))
	if err != nil {
		return nil, fmt.Errorf("logging in to cloud %q at %s: %w", cloud, ao.IdentityEndpoint, describe(err))
	}
	sc, err := openstack.NewComputeV2(pc, eo)
	if err != nil {
		return nil, fmt.Errorf("cloud %q: finding the compute endpoint in the catalog: %w", cloud, err)
	}
	if extras.ComputeOverride != "" {
		sc.Endpoint = slashed(extras.ComputeOverride)
	}
	var placement *gophercloud.ServiceClient
	var placementErr error
	if extras.PlacementOverride != "" {
		placement = &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: slashed(extras.PlacementOverride), Type: "placement"}
	} else if placement, placementErr = openstack.NewPlacementV1(pc, eo); placementErr != nil {
		placement = nil
		placementErr = fmt.Errorf("cloud %q: finding the placement endpoint in the catalog: %w (or set placement_endpoint_override in clouds.yaml)", cloud, placementErr)
	}
	return newClient(cloud, file, pc, sc, placement, placementErr, opts)
}

// connectToken connects with a token given in clouds.yaml (auth_type
// admin_token: auth.token, sent as is) and the endpoints it names: no
// identity service is asked.
func connectToken(cloud, file string, e cloudExtras, opts Options) (*Client, error) {
	compute := e.ComputeOverride
	if compute == "" {
		compute = e.Auth.Endpoint
	}
	if compute == "" {
		return nil, fmt.Errorf("cloud %q has auth_type %s but neither compute_endpoint_override nor auth.endpoint: add compute_endpoint_override: http://HOST:8774/v2.1", cloud, e.AuthType)
	}
	if e.Auth.Token == "" && e.AuthType == "admin_token" {
		return nil, fmt.Errorf("cloud %q has auth_type admin_token but no auth.token", cloud)
	}
	pc := &gophercloud.ProviderClient{}
	pc.UseTokenLock()
	pc.SetToken(e.Auth.Token)
	sc := &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: slashed(compute), Type: "compute"}
	var placement *gophercloud.ServiceClient
	var placementErr error
	if e.PlacementOverride != "" {
		placement = &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: slashed(e.PlacementOverride), Type: "placement"}
	} else {
		placementErr = fmt.Errorf("cloud %q has no placement_endpoint_override (auth_type %s has no catalog to find placement in): add placement_endpoint_override: http://HOST:8778", cloud, e.AuthType)
	}
	return newClient(cloud, file, pc, sc, placement, placementErr, opts)
}

func newClient(cloud, file string, pc *gophercloud.ProviderClient, sc, placement *gophercloud.ServiceClient, placementErr error, opts Options) (*Client, error) {
	sc.Microversion = opts.Microversion
	if sc.Microversion == "" {
		sc.Microversion = DefaultMicroversion
	}
	base, err := keelBase(sc.Endpoint)
	if err != nil {
		return nil, err
	}
	keel := &gophercloud.ServiceClient{ProviderClient: pc, Endpoint: base + "/keel/v1/", Type: "keel"}
	if abs, err := filepath.Abs(file); err == nil {
		file = abs
	}
	return &Client{cloud: cloud, cloudsYAML: file, compute: sc, keel: keel, placement: placement, placementErr: placementErr}, nil
}

// slashed ends an endpoint URL with one slash, as gophercloud's
// ServiceURL expects.
func slashed(u string) string { return strings.TrimRight(u, "/") + "/" }

// keelBase is the compute endpoint's scheme and host: keel serves its own
// endpoints next to /compute.
func keelBase(computeEndpoint string) (string, error) {
	u, err := url.Parse(computeEndpoint)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "", fmt.Errorf("the catalog's compute endpoint %q is not a URL", computeEndpoint)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Cloud is the name of the cloud the client is connected to.
func (c *Client) Cloud() string { return c.cloud }

// CloudsYAML is the clouds.yaml the cloud was read from, as an absolute
// path.
func (c *Client) CloudsYAML() string { return c.cloudsYAML }

// ComputeEndpoint is the compute API's URL (from the catalog).
func (c *Client) ComputeEndpoint() string { return c.compute.Endpoint }

// Microversion is the compute API microversion in use.
func (c *Client) Microversion() string { return c.compute.Microversion }

// ComputeClient is the underlying gophercloud compute client, for calls
// this package does not wrap.
func (c *Client) ComputeClient() *gophercloud.ServiceClient { return c.compute }

// describe turns gophercloud's errors into the API's own message: Nova's
// error bodies ({"badRequest": {"code": 400, "message": "…"}}) carry the
// reason, and an unreachable endpoint deserves a hint.
func describe(err error) error {
	if err == nil {
		return nil
	}
	var ue gophercloud.ErrUnexpectedResponseCode
	if errors.As(err, &ue) {
		msg := apiMessage(ue.Body)
		if msg == "" {
			msg = strings.TrimSpace(string(ue.Body))
		}
		if msg == "" {
			msg = fmt.Sprintf("%s %s", ue.Method, ue.URL)
		}
		return &APIError{Status: ue.Actual, Message: msg}
	}
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		return fmt.Errorf("%w (is keel running? `keel dev` starts one)", err)
	}
	return err
}

// IsUnreachable reports whether err is the server being away — refused
// or dropped connections, as while it restarts — rather than an answer.
func IsUnreachable(err error) bool {
	var oe *net.OpError
	return errors.As(err, &oe) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET)
}

// APIError is an error response from the API.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("%s (HTTP %d)", e.Message, e.Status) }

// Is makes a 404 match ErrNotFound.
func (e *APIError) Is(target error) bool { return target == ErrNotFound && e.Status == 404 }

// apiMessage extracts the message of a Nova- or Keystone-shaped error body.
func apiMessage(body []byte) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(body, &m) != nil {
		return ""
	}
	for _, raw := range m {
		var inner struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(raw, &inner) == nil && inner.Message != "" {
			return inner.Message
		}
	}
	return ""
}

func isNotFound(err error) bool {
	return gophercloud.ResponseCodeIs(err, 404) || errors.Is(err, ErrNotFound)
}
