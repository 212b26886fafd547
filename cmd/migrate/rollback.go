package main

import (
	"github.com/spf13/cobra"
)

type rollbackFlags struct {
	vars        varFlags
	phases      []string
	autoApprove bool
	json        bool
}

func (a *app) rollbackCommand() *cobra.Command {
	var o rollbackFlags
	cmd := &cobra.Command{
		Use:   "rollback [--phase NAME]...",
		Short: "Roll back completed steps, phase by phase from the last",
		Long: `Roll back the named phases (all by default): revert each completed step
with the revert data recorded when it ran, in reverse order, phase by phase
from the last. The steps that cannot be reverted are listed before anything
is done. Like run,
it asks for confirmation, is checkpointed, and resumes after an interrupt.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return a.rollback(o) },
	}
	o.vars.add(cmd)
	cmd.Flags().StringArrayVar(&o.phases, "phase", nil, "roll back this phase `NAME` (repeatable); all phases by default")
	cmd.Flags().BoolVar(&o.autoApprove, "auto-approve", false, "roll back without asking for confirmation")
	cmd.Flags().BoolVar(&o.json, "json", false, "print one JSON object per event on stdout, and nothing else")
	return cmd
}

func (a *app) rollback(o rollbackFlags) (err error) {
	v := a.view()
	s, err := a.openSession(o.vars, o.json, true, 0)
	if err != nil {
		return err
	}
	defer s.close(&err)
	rv, stop, cancel, e := s.rv, s.stop, s.cancel, s.e

	rp, err := e.PlanRollback(o.phases)
	if err != nil {
		return err
	}
	e.NoteChanges(cancel, rp)
	if !o.json {
		v.RollbackPlan(rp)
	}
	if !rp.HasChanges() {
		if o.json {
			v.Note("Nothing to roll back.")
		} else {
			v.Nothing("Nothing to roll back.")
		}
		return nil
	}
	tty := v.Stdout()
	if o.json {
		tty = v.Stderr()
	}
	if !o.autoApprove {
		if err := a.confirm(stop, tty, "Do you want to undo these steps?", "undo these steps"); err != nil {
			return interrupted(stop, err)
		}
	}
	if err := s.begin(); err != nil {
		return err
	}
	rv.Start()
	err = e.Rollback(stop, cancel, rp)
	if err == nil {
		rv.Summary()
	}
	rv.Finish()
	return interrupted(stop, err)
}
