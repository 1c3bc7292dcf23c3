// Command lvhosts starts and stops libvirt test daemons side by side
// (package lvhost) for scripts: tests/libvirt.sh runs keel dev on them.
//
//	lvhosts up DIR HOST...    start one daemon per host, print each
//	                          host's connection URI, and return
//	lvhosts restart DIR HOST  restart one host's libvirtd
//	lvhosts down DIR          stop every daemon and its guests (by PID)
//	                          and remove the namespaces
package main

import (
	"context"
	"fmt"
	"os"

	"keel/internal/compute/libvirt/lvhost"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "lvhosts:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: lvhosts up DIR HOST... | restart DIR HOST | down DIR")
	}
	ctx := context.Background()
	switch args[0] {
	case "up":
		c, err := lvhost.Start(ctx, lvhost.Options{Dir: args[1], Hosts: args[2:]})
		if err != nil {
			return err
		}
		for _, h := range c.Hosts {
			fmt.Printf("%s %s %s pid %d\n", h.Name, h.Addr, h.URI(), h.PID)
		}
		return nil
	case "restart":
		c, err := lvhost.Load(args[1])
		if err != nil || len(args) != 3 {
			return fmt.Errorf("restart DIR HOST: %v", err)
		}
		return c.Restart(ctx, args[2])
	case "down":
		c, err := lvhost.Load(args[1])
		if err != nil {
			return err
		}
		return c.Stop()
	}
	return fmt.Errorf("unknown command %q", args[0])
}
