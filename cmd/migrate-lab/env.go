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
running in --dir: INCUS_DIR (the incus provider's default socket becomes the
lab's) and the example's variables. In a shell: eval "$(migrate-lab env)".`,
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
