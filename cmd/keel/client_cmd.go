package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"keel/internal/client"
)

// pollInterval is how often --wait polls the API.
const pollInterval = 200 * time.Millisecond

// clientLong is the paragraph every client command's help ends with.
const clientLong = `

It reads clouds.yaml as openstackclient does: $OS_CLIENT_CONFIG_FILE, else
./clouds.yaml, ~/.config/openstack/clouds.yaml or /etc/openstack/clouds.yaml,
and uses the cloud --os-cloud names (default: $OS_CLOUD, else "keel", the
cloud keel dev writes to DATA_DIR/clouds.yaml).`

// withClientCommands adds keel's API client commands to the service
// commands: host, migration, schedule and audit as new commands, and list,
// show, create, delete and migrate under the existing server command (which
// still runs the control plane when given no subcommand).
func withClientCommands(cmds ...*cobra.Command) []*cobra.Command {
	for _, c := range cmds {
		if c.Name() == "server" {
			c.AddCommand(serverClientCommands()...)
			c.Short = "Run the control plane; with a subcommand (list, create, migrate, …), manage servers"
			c.Long += `

With a subcommand, server manages servers (instances) through the compute
API instead, as "openstack server" does: keel server list, show, create,
delete and migrate --live. ` + "`keel server list --help`" + ` and the others tell more.`
			c.Example += `
  keel server list
  keel server create web1 --flavor m1.small --wait
  keel server migrate --live web1 --wait`
		}
	}
	return append(cmds, hostCommand(), migrationCommand(), scheduleCommand(), auditCommand(), planCommand(), rebalanceCommand())
}

// clientFlags are the flags every client command shares.
type clientFlags struct {
	cloud        string
	microversion string
	format       string
	// For a Nova cloud (addNovaFlags): the local plan store and nova.conf.
	dataDir  string
	novaConf string
}

func addClientFlags(cmd *cobra.Command) *clientFlags {
	cf := &clientFlags{}
	f := cmd.Flags()
	f.StringVar(&cf.cloud, "os-cloud", "", `cloud in clouds.yaml (default: $OS_CLOUD, else "keel")`)
	f.StringVar(&cf.microversion, "os-compute-api-version", client.DefaultMicroversion, "compute API microversion")
	f.StringVarP(&cf.format, "format", "f", "table", "output format: table or json")
	return cf
}

// connect checks the flags and logs in.
func (cf *clientFlags) connect(cmd *cobra.Command) (*client.Client, error) {
	if cf.format != "table" && cf.format != "json" {
		return nil, fmt.Errorf("--format must be table or json, got %q", cf.format)
	}
	return client.Connect(cmd.Context(), environOf(cmd.Context()).clientOptions(client.Options{Cloud: cf.cloud, Microversion: cf.microversion}))
}

func (cf *clientFlags) json() bool { return cf.format == "json" }

// writeJSON prints v as indented JSON.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table is an aligned table on w; rows are cells, flushed by Flush.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			cells[i] = "-"
		}
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

// rowRaw writes cells as they are (empty cells stay empty).
func (t *table) rowRaw(cells ...string) { fmt.Fprintln(t.tw, strings.Join(cells, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// bar draws a share as ▕██████░░░░▏ 62%.
func bar(used, total float64) string {
	const width = 10
	if total <= 0 {
		return "▕" + strings.Repeat("░", width) + "▏    -"
	}
	share := max(used/total, 0)
	full := int(min(share, 1)*width + 0.5) // the bar stops at full; the share does not
	if used > 0 && full == 0 {
		full = 1 // something is used: show it
	}
	pct := fmt.Sprintf("%d%%", int(share*100+0.5))
	if used > 0 && pct == "0%" {
		pct = "<1%"
	}
	return fmt.Sprintf("▕%s%s▏ %4s", strings.Repeat("█", full), strings.Repeat("░", width-full), pct)
}

// stamp renders a timestamp for a table, in UTC.
func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02 15:04:05")
}
