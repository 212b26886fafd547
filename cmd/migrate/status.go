package main

import (
	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/views"
)

func (a *app) statusCommand() *cobra.Command {
	vf := varFlags{optional: true}
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show every phase and step with its status, attempts, times and last error",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) (err error) {
			rb, st, _, order, err := a.readState(vf)
			if err != nil {
				return err
			}
			defer a.closeState(st, &err)
			snap := st.Snapshot()
			s := views.BuildStatus(order, snap)
			s.Services = views.ServiceWindows(rb.Services, snap)
			if asJSON {
				return a.view().StatusJSON(s)
			}
			a.view().Status(s)
			return nil
		},
	}
	vf.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}
