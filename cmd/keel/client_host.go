package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

func hostCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Hypervisor hosts, as the compute API reports them",
	}
	cmd.AddCommand(hostListCommand())
	return cmd
}

func hostListCommand() *cobra.Command {
	var cf *clientFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List hosts with their state and how full they are",
		Long: `list shows one row per hypervisor (os-hypervisors/detail, admin): its
service state (up/down) and status (enabled/disabled), vCPUs, RAM (GiB) and
disk (GB) used of total with a bar each, and its running instances.

The numbers are the host records the resource trackers keep (what Nova's
hypervisor API shows; RAM used includes reserved_host_memory_mb). keel's
scheduler reads claims instead, which ` + "`keel schedule explain`" + ` shows.` + clientLong,
		Example: `  keel host list
  keel host list --format json
  OS_CLOUD=keel keel host list`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := cf.connect(cmd)
			if err != nil {
				return err
			}
			hs, err := c.Hosts(cmd.Context())
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if cf.json() {
				return writeJSON(out, hs)
			}
			if len(hs) == 0 {
				fmt.Fprintln(out, "no hosts (start agents: keel dev, or keel agent)")
				return nil
			}
			t := newTable(out)
			t.rowRaw("HOST", "STATE", "STATUS", "VCPUS", "", "RAM GiB", "", "DISK GB", "", "VMS")
			for _, h := range hs {
				t.rowRaw(h.Name, h.State, h.Status,
					fmt.Sprintf("%d/%d", h.VCPUsUsed, h.VCPUs), "VCPU "+bar(float64(h.VCPUsUsed), float64(h.VCPUs)),
					fmt.Sprintf("%.1f/%.1f", float64(h.MemoryMBUsed)/1024, float64(h.MemoryMB)/1024), "RAM "+bar(float64(h.MemoryMBUsed), float64(h.MemoryMB)),
					fmt.Sprintf("%d/%d", h.LocalGBUsed, h.LocalGB), "DISK "+bar(float64(h.LocalGBUsed), float64(h.LocalGB)),
					fmt.Sprint(h.RunningVMs))
			}
			return t.flush()
		},
	}
	cf = addClientFlags(cmd)
	return cmd
}
