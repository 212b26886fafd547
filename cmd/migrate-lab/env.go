package main

import (
	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/lab/labenv"
)

func (a *app) envCommand() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:   "env",
		Short: "Print the export lines that point migrate and examples/homelab at a running lab",
		Long: `Print the export lines that point migrate and examples/homelab at the lab
running in --dir: INCUS_CONF (an incus CLI configuration whose default
remote, "lab", is the lab's Incus host over HTTPS with a trusted client
certificate: the incus CLI and the incus provider both use it) and the
example's variables. In a shell: eval "$(migrate-lab env)", then
incus list, or migrate plan.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			vars, err := labenv.Read(dir)
			if err != nil {
				return err
			}
			a.view().LabEnv(vars)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", labenv.DefaultDir(), "the lab's directory `D`")
	return cmd
}
