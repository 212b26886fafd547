package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/lab/labenv"
	"github.com/homelab-migrate/migrate/providers/plugin"
)

// labProgram serves the lab: a program of its own, as the provider
// programs are, so that migrate does not link the lab's libraries.
const labProgram = "migrate-lab"

func (a *app) labCommand() *cobra.Command {
	lab := &cobra.Command{
		Use:   "lab",
		Short: "The lab home server: an Incus host with the old VMs, Talos VMs and their Kubernetes, in one process",
	}
	var dir string
	var block int
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Run the lab home server until Ctrl-C or SIGTERM",
		Long: `Run the lab home server until Ctrl-C or SIGTERM: an Incus host holding the
old VMs (services, matrix, k3s) on a unix socket, whose VMs booted from the
Talos ISO become Talos nodes in maintenance mode (a real Kubernetes after
their bootstrap), the host's data directory, the Talos ISO and the Matrix
federation endpoint of examples/homelab. In another shell,
eval "$(migrate lab env)" points migrate at it. It runs the program
migrate-lab (beside migrate, or in PATH).`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			prog, err := plugin.Locate(labProgram)
			if err != nil {
				return err
			}
			// The lab replaces this process: signals reach it as they were sent.
			return syscall.Exec(prog, []string{labProgram, "--dir", dir, "--address-block", strconv.Itoa(block)}, os.Environ())
		},
	}
	serve.Flags().IntVar(&block, "address-block", 0, "the VMs get addresses 127.`B`.1.N (0: 127.0.1.N); another block lets two labs run side by side")
	env := &cobra.Command{
		Use:   "env",
		Short: "Print the export lines that point migrate and examples/homelab at a running lab",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			vars, err := labenv.Read(dir)
			if err != nil {
				return err
			}
			for _, kv := range vars {
				k, v, _ := strings.Cut(kv, "=")
				fmt.Printf("export %s=%s\n", k, shellQuote(v))
			}
			return nil
		},
	}
	for _, c := range []*cobra.Command{serve, env} {
		c.Flags().StringVar(&dir, "dir", labenv.DefaultDir(), "the lab's directory `D`")
	}
	lab.AddCommand(serve, env)
	return lab
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-:=,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
