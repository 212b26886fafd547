package main

import (
	"github.com/spf13/cobra"
)

func (a *app) validateCommand() *cobra.Command {
	vf := varFlags{optional: true} // like terraform validate: variables stay unknown
	cmd := &cobra.Command{
		Use:   "validate",
		Short: "Check the runbook for mistakes, all of them at once",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			rb, err := a.load(vf)
			if err != nil {
				return err
			}
			steps := 0
			for _, ph := range rb.Phases {
				steps += len(ph.Steps)
			}
			a.view().Valid(len(rb.Phases), steps)
			return nil
		},
	}
	vf.add(cmd)
	return cmd
}
