package local

import (
	"context"
	"fmt"
	"time"

	"github.com/homelab-migrate/migrate/phases"
	"github.com/homelab-migrate/migrate/providers/sdk"
)

type approvalAttrs struct {
	Message       string `cty:"message" required:"true" doc:"What the person must have done or agree to."`
	RevertMessage string `cty:"revert_message" doc:"What a person must do by hand when this step is rolled back (switch the DNS back): the rollback plan lists it before anything is undone, and the rollback prints it when it reaches this step."`
}

type approvalOutputs struct {
	ApprovedBy string `cty:"approved_by"`
}

var approvalStep = &sdk.StepType[*Provider, approvalAttrs, none, none]{
	Name:        Approval,
	Description: "A human gate: asks at the terminal, or needs --approve ADDRESS; records who approved and when.",
	Rollback:    "Nothing to undo in the system; revert_message, when set, is printed when the rollback reaches the step (e.g. \"switch DNS back\").",
	Outputs:     approvalOutputs{},
	WaitsOnly:   true, // it waits for a person: a Ctrl-C at the question is a "not now", and the next run asks again
	Unknowns:    true, // the plan shows the message as far as it is known
	Plan: func(_ context.Context, c *call, a approvalAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		diff := "ask a person: " + c.Shown(a.Message, "message")
		if a.RevertMessage != "" {
			diff += "\n  on rollback: " + c.Shown(a.RevertMessage, "revert_message")
		}
		return sdk.Plan[none]{Diff: diff}
	},
	Apply:  applyApproval,
	Revert: revertApproval,
}

// revertApproval undoes nothing itself: what was done by hand is undone by
// hand, so it says what, from the runbook (the state keeps no message
// that may hold a secret; the log is scrubbed).
func revertApproval(_ context.Context, c *call, a approvalAttrs, _ sdk.Applied[none]) phases.Diagnostics {
	if a.RevertMessage != "" {
		c.Log.Printf("by hand, now: %s", c.Shown(a.RevertMessage, "revert_message"))
	}
	return nil
}

// applyApproval passes when --approve named the step, or when the person
// at the terminal says yes. It records who approved and when.
func applyApproval(_ context.Context, c *call, a approvalAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
	fail := func(d phases.Diagnostics) sdk.Apply[none, none] { return sdk.Apply[none, none]{Diagnostics: d} }
	by := c.Approval.By
	switch {
	case by != "":
	case c.Approval.Prompt != nil:
		// The question goes to the terminal: no secret in it.
		ok, err := c.Approval.Prompt(c.Scrub.Text(fmt.Sprintf("Approve %s? %s", c.Addr, c.Shown(a.Message, "message"))))
		if err != nil {
			return fail(phases.Errorf("Approval Failed", "Could not ask for the approval of %s: %v.", c.Addr, err))
		}
		if !ok {
			return fail(phases.Errorf("Approval Refused", "Step %s was not approved: only 'yes' approves it.", c.Addr))
		}
		by = localUser()
	default:
		return fail(phases.Errorf("Approval Required",
			"Step %s needs a person: rerun with --approve %s, or run it in a terminal.", c.Addr, c.Addr))
	}
	// The rollback plan shows the description before anything is undone.
	undo := nothingToUndo()
	switch {
	case a.RevertMessage != "" && c.Sensitive("revert_message"):
		undo.Description = "ask a person what its revert_message says (sensitive: shown, redacted, when reached)"
	case a.RevertMessage != "":
		undo.Description = "ask a person: " + a.RevertMessage
	}
	return sdk.Apply[none, none]{
		Outputs: approvalOutputs{by},
		Revert:  undo,
		Facts:   map[string]string{"approved_by": by, "approved_at": time.Now().UTC().Format(time.RFC3339)},
	}
}

type waitAttrs struct {
	Duration string `cty:"duration" required:"true" doc:"How long to wait, such as \"30s\"; \"0s\" is allowed."`
}

var waitStep = &sdk.StepType[*Provider, waitAttrs, none, none]{
	Name:        Wait,
	Description: "A pause of a given duration.",
	Rollback:    "Nothing to undo.",
	WaitsOnly:   true,
	Unknowns:    true,
	Validate: func(c *call, a *waitAttrs) phases.Diagnostics {
		if c.Unknown("duration") {
			return nil
		}
		_, d := duration(c, "duration", a.Duration)
		return d
	},
	Plan: func(_ context.Context, _ *call, a waitAttrs, _ *sdk.Prior[none, none]) sdk.Plan[none] {
		return sdk.Plan[none]{Diff: "wait " + a.Duration}
	},
	Apply: applyWait,
}

// applyWait sleeps, or returns at once for "0s": thousands of zero waits
// must cost next to nothing.
func applyWait(ctx context.Context, c *call, a waitAttrs, _ none, _ *sdk.Prior[none, none]) sdk.Apply[none, none] {
	dur, _ := duration(c, "duration", a.Duration)
	if dur > 0 {
		t := time.NewTimer(dur)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return sdk.Apply[none, none]{Diagnostics: sdk.Interrupted(c.Addr, context.Cause(ctx))}
		}
	}
	// An empty object, as wait steps always recorded.
	return sdk.Apply[none, none]{Outputs: struct{}{}, Revert: nothingToUndo()}
}

// duration parses a non-negative duration attribute.
func duration(c *call, name, s string) (time.Duration, phases.Diagnostics) {
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, invalid("The %q attribute of %s must be a duration such as \"30s\" or \"5m\", not %q.", name, c.Addr, s)
	}
	return d, nil
}
