package main

import (
	"context"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/state/backend"
	"github.com/homelab-migrate/migrate/views"
)

type planFlags struct {
	vars           varFlags
	phases         []string
	out            string
	json           bool
	detailedExitCd bool
}

func (a *app) planCommand() *cobra.Command {
	var o planFlags
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Show what a run would do, step by step, without changing anything",
		Long: `Show what a run would do: per phase, each step to create (+), update (~) or
redo because it drifted (!), with the provider's diff, and the checks that
will run. Nothing is changed and the state is not locked.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return a.plan(o) },
	}
	o.vars.add(cmd)
	cmd.Flags().StringArrayVar(&o.phases, "phase", nil, "plan only this phase `NAME` (repeatable); all phases by default")
	cmd.Flags().StringVar(&o.out, "out", "", "save the plan to `FILE`, for run --plan")
	cmd.Flags().BoolVar(&o.json, "json", false, "print the plan as JSON")
	cmd.Flags().BoolVar(&o.detailedExitCd, "detailed-exitcode", false, "exit 2 when the plan has changes, 0 when it has none")
	return cmd
}

func (a *app) plan(o planFlags) (err error) {
	v := a.view()
	rb, err := a.load(o.vars)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals()...)
	defer stop()
	st, b, err := a.openState(ctx, rb, false)
	if err != nil {
		return err
	}
	defer a.closeState(st, &err)
	e, err := a.engine(ctx, rb, st, 0, nil)
	if err != nil {
		return err
	}
	defer e.Close()
	p, diags := e.Plan(ctx, engine.PlanOptions{Phases: o.phases})
	v.Diagnostics(diags)
	if diags.HasErrors() {
		return reported(exitError)
	}
	if ctx.Err() != nil {
		return engine.ErrInterrupted
	}
	if o.out != "" {
		if err := engine.WritePlan(o.out, p); err != nil {
			return err
		}
	}
	var warnings []string
	if w := backend.Warning(b.Config); w != "" {
		v.Warn("%s", w)
		warnings = append(warnings, w)
	}
	if o.json {
		if err := views.PlanJSON(v.Stdout(), p, warnings...); err != nil {
			return err
		}
	} else {
		v.Plan(p)
		if o.out != "" {
			v.Note("Saved the plan to %s; run it with: migrate run --plan %s", o.out, o.out)
		}
	}
	if o.detailedExitCd && p.HasChanges() {
		return reported(exitChanges)
	}
	return nil
}
