package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"keel/internal/config"
)

// configFlags are the flags every service command shares: a nova.conf-
// style file, named shortcuts, and --set for any option.
type configFlags struct {
	file    string
	sets    []string
	named   map[string]*string // flag name → value, for the shortcuts below
	verbose bool
}

// shortcuts map flag names to [group] option.
var shortcuts = map[string][2]string{
	"data-dir":         {"keel", "data_dir"},
	"driver":           {"keel", "driver"},
	"listen":           {"keel", "listen"},
	"nats-url":         {"keel", "nats_url"},
	"nats-credentials": {"keel", "nats_credentials"},
	"policy":           {"keel", "policy"},
}

// addConfigFlags adds --config, --set, --verbose and the shortcuts named
// in only (every shortcut when only is empty).
func addConfigFlags(cmd *cobra.Command, only ...string) *configFlags {
	cf := &configFlags{named: map[string]*string{}}
	f := cmd.Flags()
	f.StringVar(&cf.file, "config", "", "nova.conf-style configuration `FILE` (keel config sample prints every option)")
	f.StringArrayVar(&cf.sets, "set", nil, "set any option, as group.option=value (e.g. --set filter_scheduler.host_subset_size=3); repeatable")
	f.BoolVarP(&cf.verbose, "verbose", "v", false, "log at debug level")
	help := map[string]string{
		"data-dir":         "directory for the database, bus credentials, users and tokens ([keel] data_dir)",
		"listen":           "HTTP listen address ([keel] listen)",
		"driver":           "agents' virt driver: fake, qemu or libvirt ([keel] driver)",
		"nats-url":         "external NATS URL(s), comma-separated; empty runs an embedded server ([keel] nats_url)",
		"nats-credentials": "bus credentials file, JSON user and password ([keel] nats_credentials; default DATA_DIR/bus-credentials.json)",
		"policy":           "what the scheduler's weighers read: claim, dest-update or legacy ([keel] policy)",
	}
	for name := range shortcuts {
		if len(only) == 0 || slices.Contains(only, name) {
			cf.named[name] = f.String(name, "", help[name])
		}
	}
	return cf
}

// load reads the file (if any), applies the flags that were given, and
// logs the file's warnings. The file and a relative data_dir are found
// from the command's working directory (environ).
func (cf *configFlags) load(cmd *cobra.Command, log *slog.Logger) (config.Config, error) {
	cfg, err := cf.loadFlags(cmd, log)
	cfg.Keel.DataDir = environOf(cmd.Context()).path(cfg.Keel.DataDir)
	return cfg, err
}

func (cf *configFlags) loadFlags(cmd *cobra.Command, log *slog.Logger) (config.Config, error) {
	cfg := config.Default()
	if cf.file != "" {
		var warns []config.Warning
		var err error
		cfg, warns, err = config.Load(environOf(cmd.Context()).path(cf.file))
		if errors.Is(err, fs.ErrNotExist) {
			return cfg, fmt.Errorf("configuration file %s does not exist", cf.file)
		}
		if err != nil {
			return cfg, err
		}
		for _, w := range warns {
			log.Warn("configuration: " + w.String())
		}
	}
	for name, opt := range shortcuts {
		if cf.named[name] != nil && cmd.Flags().Changed(name) {
			if err := cfg.Set(opt[0], opt[1], *cf.named[name]); err != nil {
				return cfg, fmt.Errorf("--%s: %w", name, err)
			}
		}
	}
	for _, s := range cf.sets {
		key, value, ok := strings.Cut(s, "=")
		group, opt, ok2 := strings.Cut(key, ".")
		if !ok || !ok2 {
			return cfg, fmt.Errorf("--set %q: want group.option=value", s)
		}
		if err := cfg.Set(group, opt, value); err != nil {
			return cfg, fmt.Errorf("--set %s: %w", s, err)
		}
	}
	return cfg, nil
}

func (cf *configFlags) logger() *slog.Logger {
	level := slog.LevelInfo
	if cf.verbose {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func configCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Configuration helpers"}
	cmd.AddCommand(&cobra.Command{
		Use:   "sample",
		Short: "Print a sample configuration file with every option, its default and its meaning",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return config.WriteSample(cmd.OutOrStdout())
		},
	})
	return cmd
}
