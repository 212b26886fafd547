package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/lab/home"
	"github.com/homelab-migrate/migrate/lab/labenv"
)

func (a *app) reserveCommand() *cobra.Command {
	var dir string
	var remove bool
	cmd := &cobra.Command{
		Use:   "reserve MAC [ADDRESS]",
		Short: "Make the running lab's home router reserve ADDRESS for MAC, as you would in a router's web page",
		Long: `Make the home router of the lab running in --dir give ADDRESS to MAC from
its next lease on (--remove: forget MAC's reservation; it then gets a
dynamic address). The lab starts with the reservations of examples/homelab's
node_mac and rehearsal_mac; a runbook written by migrate init chooses new
MACs, and its site.auto.hcl says which addresses to reserve for them, such as
migrate-lab reserve 10:66:6a:25:77:3c 127.30.200.50.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(_ *cobra.Command, args []string) error {
			addr := ""
			switch {
			case remove && len(args) == 2:
				return errors.New("--remove takes the MAC alone")
			case !remove && len(args) == 1:
				return errors.New("give the ADDRESS to reserve for " + args[0] + ", or --remove")
			case !remove:
				addr = args[1]
			}
			if err := home.ReserveIn(dir, args[0], addr); err != nil {
				return err
			}
			if remove {
				a.view().Note("The lab's router no longer reserves an address for %s.", args[0])
			} else {
				a.view().Note("The lab's router gives %s to %s from its next lease on.", addr, args[0])
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", labenv.DefaultDir(), "the lab's directory `D`")
	cmd.Flags().BoolVar(&remove, "remove", false, "forget MAC's reservation")
	return cmd
}
