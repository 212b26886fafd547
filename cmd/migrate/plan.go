package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/engine"
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
	st, err := a.openState(false)
	if err != nil {
		return err
	}
	defer a.closeState(st, &err)
	ctx, stop := signal.NotifyContext(context.Background(), stopSignals()...)
	defer stop()
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
		if err := writePlan(o.out, p); err != nil {
			return err
		}
	}
	if o.json {
		if err := views.PlanJSON(v.Stdout(), p); err != nil {
			return err
		}
	} else {
		v.Plan(p)
		if o.out != "" {
			v.Note("Saved the plan to %s; run it with: migrate run --plan %s", o.out, o.out)
		}
	}
	if o.detailedExitCd && views.HasWork(p) {
		return reported(exitChanges)
	}
	return nil
}

// writePlan saves a plan readable only by its owner.
func writePlan(path string, p *engine.Plan) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("saving the plan: %w", err)
	}
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return fmt.Errorf("saving the plan: %w", err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("saving the plan: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("saving the plan: %w", err)
	}
	return nil
}

// readPlan loads a plan saved by plan --out.
func readPlan(path string) (*engine.Plan, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the plan: %w", err)
	}
	var p engine.Plan
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("reading the plan %s: %w", path, err)
	}
	if p.FormatVersion != engine.PlanFormatVersion {
		return nil, fmt.Errorf("the plan %s is in format version %d; this migrate reads version %d: make a new plan", path, p.FormatVersion, engine.PlanFormatVersion)
	}
	return &p, nil
}
