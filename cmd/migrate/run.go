package main

import (
	"errors"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/homelab-migrate/migrate/engine"
	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/views"
)

type runFlags struct {
	vars        varFlags
	phases      []string
	all         bool
	planFile    string
	autoApprove bool
	parallelism int
	approve     []string
	json        bool
}

func (a *app) runCommand() *cobra.Command {
	var o runFlags
	cmd := &cobra.Command{
		Use:   "run (--phase NAME... | --all | --plan FILE)",
		Short: "Run phases: plan, confirm, then run their steps",
		Long: `Run the named phases (or all of them): make a plan, show it, ask for
confirmation, then run the steps, independent ones in parallel. Earlier
phases must be complete. With --plan, run a plan saved by plan --out exactly,
if the state has not changed since.

The first Ctrl-C lets the running steps finish and stops, except what
only waits: a wait, a readiness poll, a check, an approval question, or
the wait of a step whose effect is made (an instance's wait_for) ends at
once, and the step is recorded as not done. A second Ctrl-C cancels the
steps still running. Either way the state records where the run stopped,
and the same command resumes from there, doing again what was not done.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return a.run(o) },
	}
	o.vars.add(cmd)
	f := cmd.Flags()
	f.StringArrayVar(&o.phases, "phase", nil, "run this phase `NAME` (repeatable)")
	f.BoolVar(&o.all, "all", false, "run every phase")
	f.StringVar(&o.planFile, "plan", "", "run the plan saved in `FILE` by plan --out")
	f.BoolVar(&o.autoApprove, "auto-approve", false, "run without asking for confirmation")
	f.IntVar(&o.parallelism, "parallelism", engine.DefaultParallelism, "run at most `N` steps at once")
	f.StringArrayVar(&o.approve, "approve", nil, "approve the approval step at `ADDRESS` (TYPE.NAME, or group.CALL.TYPE.NAME in a group; repeatable)")
	f.BoolVar(&o.json, "json", false, "print one JSON object per event on stdout, and nothing else")
	return cmd
}

func (o runFlags) check() error {
	switch {
	case o.planFile != "" && (o.all || len(o.phases) > 0):
		return errors.New("--plan runs the phases the plan was made for: do not combine it with --phase or --all")
	case o.planFile == "" && o.all && len(o.phases) > 0:
		return errors.New("choose either --phase or --all, not both")
	case o.planFile == "" && !o.all && len(o.phases) == 0:
		return errors.New("say what to run: --phase NAME (repeatable), --all, or --plan FILE")
	case o.parallelism < 1:
		return fmt.Errorf("--parallelism must be at least 1, not %d", o.parallelism)
	}
	return nil
}

func (a *app) run(o runFlags) (err error) {
	if err := o.check(); err != nil {
		return err
	}
	approve, err := parseApprovals(o.approve)
	if err != nil {
		return err
	}
	// A plan that cannot be read is refused before anything is opened.
	var plan *engine.Plan
	if o.planFile != "" {
		if plan, err = engine.ReadPlan(o.planFile); err != nil {
			return err
		}
	}
	v := a.view()
	s, err := a.openSession(o.vars, o.json, false, o.parallelism)
	if err != nil {
		return err
	}
	defer s.close(&err)
	rv, stop, cancel, e := s.rv, s.stop, s.cancel, s.e

	if plan == nil {
		// Out of order is refused before the plan asks any provider
		// anything (a plan reads the old VMs).
		if err := e.CheckOrder(o.phases); err != nil {
			return err
		}
		var diags phases.Diagnostics
		plan, diags = e.Plan(cancel, engine.PlanOptions{Phases: o.phases})
		v.Diagnostics(diags)
		if diags.HasErrors() {
			return reported(exitError)
		}
	}
	opts := engine.RunOptions{Approve: approve, Approver: approver(), SavedPlan: o.planFile != ""}
	err = e.ValidatePlan(plan)
	if err == nil && o.planFile != "" {
		err = e.CheckSavedPlan(cancel, plan)
	}
	if err != nil {
		if o.planFile != "" {
			return fmt.Errorf("refusing the plan %s for the state in %s: %w; nothing was changed", o.planFile, s.where(), err)
		}
		return err
	}
	if o.planFile != "" {
		if err := e.CheckPrograms(plan); err != nil {
			return fmt.Errorf("refusing the plan %s: %w; nothing was changed", o.planFile, err)
		}
	}
	warnApprovals(v, plan, approve)
	if !plan.HasChanges() {
		const nothing = "Nothing to run: every selected step is done and unchanged."
		if o.json {
			v.Note(nothing)
		} else {
			v.Plan(plan)
			v.Nothing(nothing)
		}
		return nil
	}
	tty := v.Stdout()
	if o.json {
		tty = v.Stderr()
	}
	if o.planFile == "" {
		if !o.json {
			v.Plan(plan)
		}
		if !o.autoApprove {
			if err := a.confirm(stop, tty, "Do you want to run these steps?", "run these steps"); err != nil {
				return interrupted(stop, err)
			}
		}
	}
	if err := s.begin(); err != nil {
		return err
	}
	// An approval waits for a person: the first Ctrl-C ends the question
	// (the step is not done, the next run asks again).
	opts.Prompt = a.prompter(stop, tty, rv)
	rv.Start()
	err = e.Run(stop, cancel, plan, opts)
	if err == nil {
		rv.Summary()
	}
	rv.Finish()
	return interrupted(stop, err)
}

// parseApprovals reads the addresses of --approve.
func parseApprovals(args []string) (map[phases.Address]bool, error) {
	approve := map[phases.Address]bool{}
	for _, s := range args {
		addr, err := phases.ParseAddress(s)
		if err != nil {
			return nil, fmt.Errorf("--approve: %w", err)
		}
		approve[addr] = true
	}
	return approve, nil
}

// warnApprovals points out --approve addresses the plan does not run.
func warnApprovals(v *views.View, plan *engine.Plan, approve map[phases.Address]bool) {
	inPlan := map[phases.Address]bool{}
	for _, ph := range plan.Phases {
		for _, s := range ph.Steps {
			inPlan[s.Addr] = true
		}
	}
	var missing []string
	for addr := range approve {
		if !inPlan[addr] {
			missing = append(missing, addr.String())
		}
	}
	sort.Strings(missing)
	for _, addr := range missing {
		v.Warn("--approve %s: the plan has no such step", addr)
	}
}
